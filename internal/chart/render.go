package chart

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"math"
)

// seriesColors are eight clearly distinct line colours (Tableau 10 without
// grey and olive); series beyond eight reuse them in order.
var seriesColors = []color.RGBA{
	{31, 119, 180, 255},  // blue
	{255, 127, 14, 255},  // orange
	{44, 160, 44, 255},   // green
	{214, 39, 40, 255},   // red
	{148, 103, 189, 255}, // purple
	{140, 86, 75, 255},   // brown
	{227, 119, 194, 255}, // pink
	{23, 190, 207, 255},  // cyan
}

// refColors are the colours of the dashed reference lines, kept apart from
// seriesColors.
var refColors = []color.RGBA{
	{0, 0, 0, 255},       // black
	{127, 127, 127, 255}, // grey
	{188, 189, 34, 255},  // olive
	{140, 110, 0, 255},   // dark gold
}

var (
	white     = color.RGBA{255, 255, 255, 255}
	textColor = color.RGBA{25, 25, 25, 255}
	axisColor = color.RGBA{70, 70, 70, 255}
	gridColor = color.RGBA{228, 228, 228, 255}
	boxColor  = color.RGBA{190, 190, 190, 255}
)

// Layout constants in pixels.
const (
	pad         = 12 // outer margin
	tickLen     = 5  // length of tick marks
	gap         = 4  // space between related elements
	legendGap   = 16 // space between plot area and legend
	legendPad   = 8  // inner padding of the legend box
	legendSpace = 18 // space between entries of a legend above the plot
	legendRow   = 6  // extra space between legend rows
	swatchW     = 28 // length of the line sample in the legend
	dashOn      = 7  // dash length of reference lines
	dashPeriod  = 12 // dash + gap length of reference lines
	markerHalf  = 3  // marker square is 2*markerHalf pixels wide
	denseHalf   = 2  // smaller markers for dense series
	minPlotSide = 40 // smallest usable plot area
)

// layout is the computed geometry of one render; tests use it to look inside
// the plot area.
type layout struct {
	plot           image.Rectangle // plot area; axes are on its left and bottom edges
	xLo, xHi       float64
	yLo, yHi       float64
	xTicks, yTicks []float64
	xStep, yStep   float64
}

// px maps a data X to a pixel column (fractional).
func (l *layout) px(x float64) float64 {
	return float64(l.plot.Min.X) + (x-l.xLo)/(l.xHi-l.xLo)*float64(l.plot.Dx())
}

// py maps a data Y to a pixel row (fractional).
func (l *layout) py(y float64) float64 {
	return float64(l.plot.Max.Y) - (y-l.yLo)/(l.yHi-l.yLo)*float64(l.plot.Dy())
}

// legendItem is one legend row.
type legendItem struct {
	name   string
	color  color.RGBA
	dashed bool
	marker int // half side of the marker square; 0 for none
}

// legendItems lists the series then the finite reference lines, with the
// colours they are drawn in.
func (c Chart) legendItems() []legendItem {
	var items []legendItem
	for i, s := range c.Series {
		name := s.Name
		if name == "" {
			name = fmt.Sprintf("series %d", i+1)
		}
		items = append(items, legendItem{name: name, color: seriesColors[i%len(seriesColors)]})
	}
	k := 0
	for _, r := range c.RefLines {
		if !finite(r.Y) {
			continue
		}
		name := r.Name
		if name == "" {
			name = "reference"
		}
		items = append(items, legendItem{name: name, color: refColors[k%len(refColors)], dashed: true})
		k++
	}
	return items
}

// render draws the chart and also returns its layout.
func (c Chart) render() (*image.RGBA, layout, error) {
	var l layout
	w, h, err := c.size()
	if err != nil {
		return nil, l, err
	}
	r, err := c.validate()
	if err != nil {
		return nil, l, err
	}
	fs, err := newFaces()
	if err != nil {
		return nil, l, err
	}
	defer fs.close()

	img := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(img, img.Bounds(), image.NewUniform(white), image.Point{}, draw.Src)
	th := lineHeight(fs.text)

	// Legend: at the right of the plot when the names fit in ~28% of the
	// width, otherwise in rows between the title and the plot.
	items := c.legendItems()
	rightName := w*28/100 - 2*legendPad - swatchW - 2*gap
	nameW := 0
	for _, it := range items {
		nameW = max(nameW, textWidth(fs.text, it.name))
	}
	legendRight := nameW <= rightName
	legendW, legendH := 0, 0
	if legendRight {
		legendW = 2*legendPad + swatchW + 2*gap + nameW
	} else {
		for i := range items {
			items[i].name = truncate(fs.text, items[i].name, (w-2*pad-legendSpace)/2-swatchW-2*gap)
		}
		legendH = len(flowLegend(fs, items, w)) * (th + legendRow)
	}

	// Vertical layout.
	y := pad
	title := ""
	if c.Title != "" {
		title = truncate(fs.title, c.Title, w-2*pad)
		y += lineHeight(fs.title) + pad
	}
	legendTop := y
	if !legendRight {
		y += legendH + pad
	}
	top := max(y, pad+th/2)
	bottom := h - pad - tickLen - gap - th
	xLabel := ""
	if c.XLabel != "" {
		bottom -= th + 2*gap
	}
	plotH := bottom - top
	if plotH < minPlotSide {
		return nil, l, fmt.Errorf("chart: image %dx%d too small for its title, legend and labels", w, h)
	}

	// Y axis: always includes 0, nice round ticks with room for a label each.
	yLo, yHi := math.Min(0, r.ymin), math.Max(0, r.ymax)
	if yHi <= yLo {
		yHi = yLo + 1
	}
	if yHi > 0 {
		yHi += (yHi - yLo) * 0.04 // headroom so the top point is not on the edge
	}
	l.yStep = niceStep((yHi - yLo) / float64(max(2, plotH/50)))
	for {
		lo := math.Floor(yLo/l.yStep+1e-9) * l.yStep
		hi := math.Ceil(yHi/l.yStep-1e-9) * l.yStep
		if float64(plotH)*l.yStep/(hi-lo) >= float64(th+6) || (hi-lo)/l.yStep <= 1 {
			l.yLo, l.yHi = lo, hi
			break
		}
		l.yStep = nextStep(l.yStep)
	}
	l.yTicks = ticks(l.yLo, l.yHi, l.yStep)
	yLabelW := 0
	for _, v := range l.yTicks {
		yLabelW = max(yLabelW, textWidth(fs.text, formatTick(v, l.yStep)))
	}

	// Horizontal layout.
	left := pad + yLabelW + gap + tickLen
	if c.YLabel != "" {
		left += th + 2*gap
	}
	right := w - pad - legendGap // room for half of the last X tick label
	if legendRight {
		right = w - pad - legendW - legendGap
	}
	plotW := right - left
	if plotW < minPlotSide {
		return nil, l, fmt.Errorf("chart: image %dx%d too small for its labels and legend", w, h)
	}
	l.plot = image.Rect(left, top, right, bottom)
	if c.XLabel != "" {
		xLabel = truncate(fs.text, c.XLabel, plotW)
	}
	yLabel := ""
	if c.YLabel != "" {
		yLabel = truncate(fs.text, c.YLabel, bottom-pad)
	}

	// X axis: data range padded a little, ticks spaced so labels never touch.
	l.xLo, l.xHi = r.xmin, r.xmax
	if l.xHi == l.xLo {
		d := math.Abs(l.xLo) * 0.25
		if d == 0 {
			d = 1
		}
		l.xLo, l.xHi = l.xLo-d, l.xHi+d
	} else {
		p := (l.xHi - l.xLo) * 0.03
		l.xLo, l.xHi = l.xLo-p, l.xHi+p
	}
	l.xStep = niceStep((l.xHi - l.xLo) / float64(max(2, plotW/70)))
	for {
		l.xTicks = ticks(l.xLo, l.xHi, l.xStep)
		labelW := 0
		for _, v := range l.xTicks {
			labelW = max(labelW, textWidth(fs.text, formatTick(v, l.xStep)))
		}
		if float64(plotW)*l.xStep/(l.xHi-l.xLo) >= float64(labelW+14) || len(l.xTicks) <= 2 {
			break
		}
		l.xStep = nextStep(l.xStep)
	}

	// Grid.
	for _, v := range l.yTicks {
		y := int(math.Round(l.py(v)))
		hline(img, left, right, y, gridColor)
	}
	for _, v := range l.xTicks {
		x := int(math.Round(l.px(v)))
		vline(img, x, top, bottom, gridColor)
	}

	// Axes and tick marks.
	vline(img, left, top, bottom, axisColor)
	hline(img, left, right, bottom, axisColor)
	for _, v := range l.yTicks {
		y := int(math.Round(l.py(v)))
		hline(img, left-tickLen, left, y, axisColor)
		s := formatTick(v, l.yStep)
		drawText(img, fs.text, s, left-tickLen-gap-textWidth(fs.text, s), y-th/2, textColor)
	}
	for _, v := range l.xTicks {
		x := int(math.Round(l.px(v)))
		vline(img, x, bottom, bottom+tickLen, axisColor)
		s := formatTick(v, l.xStep)
		drawText(img, fs.text, s, x-textWidth(fs.text, s)/2, bottom+tickLen+gap, textColor)
	}

	// Reference lines, below the series.
	clip := image.Rect(left, top, right+1, bottom+1)
	k := 0
	for _, rl := range c.RefLines {
		if !finite(rl.Y) {
			continue
		}
		col := refColors[k%len(refColors)]
		k++
		dashedHLine(img, clip, left, right, l.py(rl.Y), col)
	}

	// Series lines, then markers on top.
	for i, s := range c.Series {
		col := seriesColors[i%len(seriesColors)]
		havePrev := false
		var px0, py0 float64
		for j := range s.X {
			if !finite(s.X[j]) || !finite(s.Y[j]) {
				havePrev = false // a missing value breaks the line
				continue
			}
			px1, py1 := l.px(s.X[j]), l.py(s.Y[j])
			if havePrev {
				thickLine(img, clip, px0, py0, px1, py1, col)
			}
			px0, py0, havePrev = px1, py1, true
		}
	}
	for i, s := range c.Series {
		half := markerSize(s, plotW)
		items[i].marker = half
		col := seriesColors[i%len(seriesColors)]
		for j := range s.X {
			if half > 0 && finite(s.X[j]) && finite(s.Y[j]) {
				marker(img, l.px(s.X[j]), l.py(s.Y[j]), half, col)
			}
		}
	}

	// Title and axis labels.
	if title != "" {
		drawText(img, fs.title, title, (w-textWidth(fs.title, title))/2, pad, textColor)
	}
	if xLabel != "" {
		drawText(img, fs.text, xLabel, left+(plotW-textWidth(fs.text, xLabel))/2, h-pad-th, textColor)
	}
	if yLabel != "" {
		lw := textWidth(fs.text, yLabel)
		y0 := max(pad, top+(plotH-lw)/2)
		drawTextVertical(img, fs.text, yLabel, pad, y0, textColor)
	}

	// Legend outside the plot area.
	if legendRight {
		drawLegendRight(img, fs, items, right+legendGap, top, legendW, h-pad)
	} else {
		for i, row := range flowLegend(fs, items, w) {
			x := (w - row.width) / 2
			for _, it := range row.items {
				x = drawLegendItem(img, fs, it, x, legendTop+i*(th+legendRow)) + legendSpace
			}
		}
	}
	return img, l, nil
}

// markerSize returns the half side of the point markers for s: full size
// when points are well apart, smaller when they are close, and none (0) when
// they are so dense that markers would merge into a thick smudge.
func markerSize(s Series, plotW int) int {
	n := 0
	for j := range s.X {
		if finite(s.X[j]) && finite(s.Y[j]) {
			n++
		}
	}
	switch {
	case n*4 > plotW:
		return 0
	case n*10 > plotW:
		return denseHalf
	default:
		return markerHalf
	}
}

// legendRowItems is one row of a legend laid out above the plot.
type legendRowItems struct {
	items []legendItem
	width int
}

// flowLegend packs the legend items into rows no wider than the image.
func flowLegend(fs faces, items []legendItem, w int) []legendRowItems {
	var rows []legendRowItems
	var cur legendRowItems
	for _, it := range items {
		iw := swatchW + 2*gap + textWidth(fs.text, it.name)
		if len(cur.items) > 0 && cur.width+legendSpace+iw > w-2*pad {
			rows = append(rows, cur)
			cur = legendRowItems{}
		}
		if len(cur.items) > 0 {
			cur.width += legendSpace
		}
		cur.items = append(cur.items, it)
		cur.width += iw
	}
	if len(cur.items) > 0 {
		rows = append(rows, cur)
	}
	return rows
}

// drawLegendItem draws one legend entry (line sample and name) with its
// top-left corner at (x, y) and returns the x just after it.
func drawLegendItem(img *image.RGBA, fs faces, it legendItem, x, y int) int {
	cy := float64(y) + float64(lineHeight(fs.text))/2
	clip := img.Bounds()
	if it.dashed {
		dashedHLine(img, clip, x, x+swatchW, cy, it.color)
	} else {
		thickLine(img, clip, float64(x), cy, float64(x+swatchW), cy, it.color)
		if it.marker > 0 {
			marker(img, float64(x)+swatchW/2, cy, it.marker, it.color)
		}
	}
	tx := x + swatchW + 2*gap
	drawText(img, fs.text, it.name, tx, y, textColor)
	return tx + textWidth(fs.text, it.name)
}

// drawLegendRight draws the legend box with its top-left corner at (x, y), not
// extending below maxY; rows that do not fit are summarised as "+N more".
func drawLegendRight(img *image.RGBA, fs faces, items []legendItem, x, y, width, maxY int) {
	th := lineHeight(fs.text)
	rowH := th + legendRow
	fit := (maxY - y - 2*legendPad + legendRow) / rowH
	shown := items
	more := 0
	if len(items) > fit {
		shown = items[:max(0, fit-1)]
		more = len(items) - len(shown)
	}
	rows := len(shown)
	if more > 0 {
		rows++
	}
	boxH := 2*legendPad + rows*rowH - legendRow
	box := image.Rect(x, y, x+width, y+boxH)
	hline(img, box.Min.X, box.Max.X, box.Min.Y, boxColor)
	hline(img, box.Min.X, box.Max.X, box.Max.Y, boxColor)
	vline(img, box.Min.X, box.Min.Y, box.Max.Y, boxColor)
	vline(img, box.Max.X, box.Min.Y, box.Max.Y, boxColor)

	ty := y + legendPad
	for _, it := range shown {
		drawLegendItem(img, fs, it, x+legendPad, ty)
		ty += rowH
	}
	if more > 0 {
		drawText(img, fs.text, fmt.Sprintf("+%d more", more), x+legendPad, ty, textColor)
	}
}

// hline draws a 1-pixel horizontal line from x0 to x1 inclusive.
func hline(img *image.RGBA, x0, x1, y int, c color.RGBA) {
	for x := x0; x <= x1; x++ {
		setPix(img, x, y, c)
	}
}

// vline draws a 1-pixel vertical line from y0 to y1 inclusive.
func vline(img *image.RGBA, x, y0, y1 int, c color.RGBA) {
	for y := y0; y <= y1; y++ {
		setPix(img, x, y, c)
	}
}

// setPix sets one pixel if it is inside the image.
func setPix(img *image.RGBA, x, y int, c color.RGBA) {
	if (image.Point{X: x, Y: y}).In(img.Rect) {
		img.SetRGBA(x, y, c)
	}
}

// dot2 paints the 2x2 pixel block centred on the fractional point (fx, fy),
// clipped to clip; stamping it along a path gives a 2-pixel-wide line.
func dot2(img *image.RGBA, clip image.Rectangle, fx, fy float64, c color.RGBA) {
	ix, iy := int(math.Floor(fx-0.5)), int(math.Floor(fy-0.5))
	for y := iy; y <= iy+1; y++ {
		for x := ix; x <= ix+1; x++ {
			if (image.Point{X: x, Y: y}).In(clip) {
				img.SetRGBA(x, y, c)
			}
		}
	}
}

// thickLine draws a 2-pixel-wide line between two fractional points.
func thickLine(img *image.RGBA, clip image.Rectangle, x0, y0, x1, y1 float64, c color.RGBA) {
	n := int(math.Ceil(math.Max(math.Abs(x1-x0), math.Abs(y1-y0))*2)) + 1
	for i := 0; i <= n; i++ {
		t := float64(i) / float64(n)
		dot2(img, clip, x0+(x1-x0)*t, y0+(y1-y0)*t, c)
	}
}

// dashedHLine draws a 2-pixel-wide dashed horizontal line at row fy.
func dashedHLine(img *image.RGBA, clip image.Rectangle, x0, x1 int, fy float64, c color.RGBA) {
	for x := x0; x <= x1; x++ {
		if (x-x0)%dashPeriod < dashOn {
			dot2(img, clip, float64(x)+0.5, fy, c)
		}
	}
}

// marker fills a square of side 2*half centred on the fractional point.
func marker(img *image.RGBA, fx, fy float64, half int, c color.RGBA) {
	ix, iy := int(math.Floor(fx-0.5)), int(math.Floor(fy-0.5))
	for y := iy - half + 1; y <= iy+half; y++ {
		for x := ix - half + 1; x <= ix+half; x++ {
			setPix(img, x, y, c)
		}
	}
}
