package chart

import (
	"math"
	"strconv"
	"strings"
)

// niceStep returns the smallest step of the form {1,2,5}x10^k that is >= raw.
func niceStep(raw float64) float64 {
	if !(raw > 0) || math.IsInf(raw, 0) {
		return 1
	}
	exp := math.Floor(math.Log10(raw))
	base := math.Pow(10, exp)
	f := raw / base
	switch {
	case f <= 1+1e-9:
		return base
	case f <= 2+1e-9:
		return 2 * base
	case f <= 5+1e-9:
		return 5 * base
	default:
		return 10 * base
	}
}

// nextStep returns the next larger nice step after step.
func nextStep(step float64) float64 {
	return niceStep(step * 1.01)
}

// ticks returns the multiples of step within [lo, hi].
func ticks(lo, hi, step float64) []float64 {
	first := math.Ceil(lo/step-1e-9) * step
	var out []float64
	for i := 0; i < 1000; i++ {
		v := first + float64(i)*step
		if v > hi+step*1e-9 {
			break
		}
		if math.Abs(v) < step*1e-9 {
			v = 0
		}
		out = append(out, v)
	}
	return out
}

// formatTick formats a tick value with just enough decimals for step.
func formatTick(v, step float64) string {
	if v == 0 {
		return "0"
	}
	if step >= 1e7 || step < 1e-5 {
		return strconv.FormatFloat(v, 'g', 4, 64)
	}
	dec := 0
	if step < 1 {
		dec = int(math.Ceil(-math.Log10(step) - 1e-9))
	}
	s := strconv.FormatFloat(v, 'f', dec, 64)
	if strings.Trim(s, "-0.") == "" {
		return "0" // avoid "-0" and "0.00"
	}
	return s
}
