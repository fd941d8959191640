package benchreport

import (
	"fmt"
	"slices"
)

// spread is what the repetitions of one measurement give: their median, least and greatest.
type spread struct {
	median, min, max float64
	// n is how many samples it is of; 0: none.
	n int
}

// spreadOf is the spread of xs.
func spreadOf(xs []float64) spread {
	if len(xs) == 0 {
		return spread{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return spread{median: m, min: s[0], max: s[len(s)-1], n: len(s)}
}

// format writes the median with prec decimals and, when the samples differ at that precision,
// their range: "32.9 (20.4–35.1)". No samples: "–".
func (s spread) format(prec int) string {
	if s.n == 0 {
		return "–"
	}
	med := fmt.Sprintf("%.*f", prec, s.median)
	lo, hi := fmt.Sprintf("%.*f", prec, s.min), fmt.Sprintf("%.*f", prec, s.max)
	if lo == hi {
		return med
	}
	return med + " (" + lo + "–" + hi + ")"
}

// percent writes the spread of ratios as percentages over 1: "+53% (+40% to +61%)".
func (s spread) percent() string {
	if s.n == 0 {
		return "–"
	}
	med := fmt.Sprintf("%+.0f%%", 100*(s.median-1))
	lo, hi := fmt.Sprintf("%+.0f%%", 100*(s.min-1)), fmt.Sprintf("%+.0f%%", 100*(s.max-1))
	if lo == hi {
		return med
	}
	return med + " (" + lo + " to " + hi + ")"
}
