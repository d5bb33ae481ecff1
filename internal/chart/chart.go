// Package chart renders simple line charts as PNG images so that benchmark
// results (catch-up time per worker count, replication lag over time) can be
// inspected without external plotting tools.
//
// Rendering is pure and deterministic: the same Chart always produces the
// same pixels and the same PNG bytes.
package chart

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/png"
	"math"
	"os"
)

// Default image size used when Chart.Width or Chart.Height is zero.
const (
	DefaultWidth  = 900
	DefaultHeight = 500
)

// Limits on the image size; smaller images cannot fit the axes and legend,
// larger ones are almost certainly a caller bug.
const (
	minWidth  = 320
	minHeight = 200
	maxSide   = 8192
)

// Series is one named line; X and Y are parallel slices of data coordinates,
// joined in the order given. Points whose X or Y is NaN or infinite are
// skipped and break the line. Points are marked with small squares unless
// they are too dense (under ~4 px apart) for markers to be readable.
type Series struct {
	Name string
	X, Y []float64
}

// RefLine is a horizontal dashed reference line, for example the time taken
// by PostgreSQL's built-in subscription, so other lines can be compared to it.
type RefLine struct {
	Name string
	Y    float64
}

// Chart describes one plot: labelled axes, one or more series and optional
// horizontal reference lines.
type Chart struct {
	Title, XLabel, YLabel string
	Series                []Series
	// RefLines are horizontal dashed lines, e.g. the built-in subscription's time.
	RefLines []RefLine
	// Width and Height are the image size in pixels; 0 means 900x500.
	Width, Height int
}

// Render draws the chart and returns it as an image (an *image.RGBA).
func (c Chart) Render() (image.Image, error) {
	img, _, err := c.render()
	if err != nil {
		return nil, err
	}
	return img, nil
}

// EncodePNG renders the chart and returns it PNG-encoded, so callers can embed
// or hash the bytes without going through a file.
func (c Chart) EncodePNG() ([]byte, error) {
	img, _, err := c.render()
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return nil, fmt.Errorf("chart: encode PNG: %w", err)
	}
	return buf.Bytes(), nil
}

// WritePNG renders the chart and writes it as a PNG file at path.
func (c Chart) WritePNG(path string) error {
	data, err := c.EncodePNG()
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	w := bufio.NewWriter(f)
	_, err = w.Write(data)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("chart: write %s: %w", path, err)
	}
	return nil
}

// size returns the effective image size, applying defaults and checking
// bounds.
func (c Chart) size() (w, h int, err error) {
	w, h = c.Width, c.Height
	if w == 0 {
		w = DefaultWidth
	}
	if h == 0 {
		h = DefaultHeight
	}
	if w < minWidth || h < minHeight || w > maxSide || h > maxSide {
		return 0, 0, fmt.Errorf("chart: image size %dx%d out of range (need %dx%d to %dx%d)",
			w, h, minWidth, minHeight, maxSide, maxSide)
	}
	return w, h, nil
}

// finite reports whether v is neither NaN nor infinite.
func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// dataRange holds the extent of the finite data.
type dataRange struct {
	xmin, xmax, ymin, ymax float64
}

// validate checks the chart's data and returns the extent of its finite
// points and reference lines.
func (c Chart) validate() (dataRange, error) {
	if len(c.Series) == 0 {
		return dataRange{}, errors.New("chart: no series to plot (Chart.Series is empty)")
	}
	r := dataRange{
		xmin: math.Inf(1), xmax: math.Inf(-1),
		ymin: math.Inf(1), ymax: math.Inf(-1),
	}
	n := 0
	for i, s := range c.Series {
		if len(s.X) != len(s.Y) {
			return dataRange{}, fmt.Errorf("chart: series %d (%q) has %d X values but %d Y values",
				i, s.Name, len(s.X), len(s.Y))
		}
		for j := range s.X {
			x, y := s.X[j], s.Y[j]
			if !finite(x) || !finite(y) {
				continue
			}
			n++
			r.xmin, r.xmax = math.Min(r.xmin, x), math.Max(r.xmax, x)
			r.ymin, r.ymax = math.Min(r.ymin, y), math.Max(r.ymax, y)
		}
	}
	if n == 0 {
		return dataRange{}, fmt.Errorf("chart: no finite data points in %d series (all empty or NaN)", len(c.Series))
	}
	for _, rl := range c.RefLines {
		if finite(rl.Y) {
			r.ymin, r.ymax = math.Min(r.ymin, rl.Y), math.Max(r.ymax, rl.Y)
		}
	}
	return r, nil
}
