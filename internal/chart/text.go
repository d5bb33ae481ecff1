package chart

import (
	"fmt"
	"image"
	"image/color"
	"sync"

	"golang.org/x/image/font"
	"golang.org/x/image/font/gofont/gobold"
	"golang.org/x/image/font/gofont/goregular"
	"golang.org/x/image/font/opentype"
	"golang.org/x/image/math/fixed"
)

// Font sizes in pixels (DPI 72, so points equal pixels).
const (
	textSize  = 12
	titleSize = 15
)

var (
	fontsOnce   sync.Once
	regularFont *opentype.Font
	boldFont    *opentype.Font
	fontsErr    error
)

// parsedFonts parses the embedded Go fonts once; the parsed fonts are safe for
// concurrent use, faces are not, so each render creates its own faces.
func parsedFonts() (regular, bold *opentype.Font, err error) {
	fontsOnce.Do(func() {
		regularFont, fontsErr = opentype.Parse(goregular.TTF)
		if fontsErr != nil {
			return
		}
		boldFont, fontsErr = opentype.Parse(gobold.TTF)
	})
	if fontsErr != nil {
		return nil, nil, fmt.Errorf("chart: parse font: %w", fontsErr)
	}
	return regularFont, boldFont, nil
}

// faces holds the font faces used by one render.
type faces struct {
	text, title font.Face
}

func newFaces() (faces, error) {
	reg, bold, err := parsedFonts()
	if err != nil {
		return faces{}, err
	}
	text, err := opentype.NewFace(reg, &opentype.FaceOptions{Size: textSize, DPI: 72, Hinting: font.HintingFull})
	if err != nil {
		return faces{}, fmt.Errorf("chart: font face: %w", err)
	}
	title, err := opentype.NewFace(bold, &opentype.FaceOptions{Size: titleSize, DPI: 72, Hinting: font.HintingFull})
	if err != nil {
		return faces{}, fmt.Errorf("chart: font face: %w", err)
	}
	return faces{text: text, title: title}, nil
}

func (f faces) close() {
	f.text.Close()
	f.title.Close()
}

// textWidth returns the advance width of s in pixels.
func textWidth(face font.Face, s string) int {
	return font.MeasureString(face, s).Ceil()
}

// lineHeight returns ascent+descent of face in pixels.
func lineHeight(face font.Face) int {
	m := face.Metrics()
	return (m.Ascent + m.Descent).Ceil()
}

// truncate shortens s with an ellipsis so that it fits in maxW pixels.
func truncate(face font.Face, s string, maxW int) string {
	if textWidth(face, s) <= maxW {
		return s
	}
	r := []rune(s)
	for len(r) > 0 {
		r = r[:len(r)-1]
		t := string(r) + "…"
		if textWidth(face, t) <= maxW {
			return t
		}
	}
	return ""
}

// drawText draws s with its top-left corner at (x, y).
func drawText(dst *image.RGBA, face font.Face, s string, x, y int, c color.Color) {
	d := font.Drawer{
		Dst:  dst,
		Src:  image.NewUniform(c),
		Face: face,
		Dot:  fixed.Point26_6{X: fixed.I(x), Y: fixed.I(y) + face.Metrics().Ascent},
	}
	d.DrawString(s)
}

// drawTextVertical draws s rotated 90 degrees counter-clockwise (reading
// bottom to top) with the top-left corner of its rotated box at (x, y).
func drawTextVertical(dst *image.RGBA, face font.Face, s string, x, y int, c color.RGBA) {
	w, h := textWidth(face, s), lineHeight(face)
	if w <= 0 || h <= 0 {
		return
	}
	mask := image.NewAlpha(image.Rect(0, 0, w, h))
	d := font.Drawer{
		Dst:  mask,
		Src:  image.Opaque,
		Face: face,
		Dot:  fixed.Point26_6{X: 0, Y: face.Metrics().Ascent},
	}
	d.DrawString(s)
	// Pixel (mx, my) of the horizontal text lands at (x+my, y+w-1-mx).
	for my := 0; my < h; my++ {
		for mx := 0; mx < w; mx++ {
			a := mask.AlphaAt(mx, my).A
			if a == 0 {
				continue
			}
			blend(dst, x+my, y+w-1-mx, c, a)
		}
	}
}

// blend composites colour c with coverage a (0-255) over dst at (x, y).
func blend(dst *image.RGBA, x, y int, c color.RGBA, a uint8) {
	if !(image.Point{X: x, Y: y}.In(dst.Rect)) {
		return
	}
	i := dst.PixOffset(x, y)
	p := dst.Pix[i : i+4 : i+4]
	na := 255 - uint32(a)
	p[0] = uint8((uint32(c.R)*uint32(a) + uint32(p[0])*na + 127) / 255)
	p[1] = uint8((uint32(c.G)*uint32(a) + uint32(p[1])*na + 127) / 255)
	p[2] = uint8((uint32(c.B)*uint32(a) + uint32(p[2])*na + 127) / 255)
	p[3] = 255
}
