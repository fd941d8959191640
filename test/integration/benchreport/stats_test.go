package benchreport

import "testing"

func TestSpreadOf(t *testing.T) {
	tests := []struct {
		name string
		xs   []float64
		want spread
	}{
		{"none", nil, spread{}},
		{"one", []float64{3}, spread{median: 3, min: 3, max: 3, n: 1}},
		{"odd count, unsorted", []float64{32.9, 20.4, 25}, spread{median: 25, min: 20.4, max: 32.9, n: 3}},
		{"even count: the mean of the middle two", []float64{4, 1, 3, 2}, spread{median: 2.5, min: 1, max: 4, n: 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			xs := append([]float64(nil), tt.xs...)
			if got := spreadOf(tt.xs); got != tt.want {
				t.Errorf("spreadOf(%v) = %+v, want %+v", tt.xs, got, tt.want)
			}
			for i := range xs {
				if xs[i] != tt.xs[i] {
					t.Fatalf("spreadOf reordered its argument: %v, was %v", tt.xs, xs)
				}
			}
		})
	}
}

func TestSpreadFormat(t *testing.T) {
	tests := []struct {
		name    string
		s       spread
		prec    int
		want    string
		percent string
	}{
		{"none", spread{}, 1, "–", "–"},
		{"a range", spread{median: 1.25, min: 1.04, max: 1.61, n: 5}, 2, "1.25 (1.04–1.61)", "+25% (+4% to +61%)"},
		{"equal at this precision", spread{median: 2.001, min: 1.999, max: 2.004, n: 5}, 2, "2.00", "+100%"},
		{"one sample", spread{median: 0.9, min: 0.9, max: 0.9, n: 1}, 1, "0.9", "-10%"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.s.format(tt.prec); got != tt.want {
				t.Errorf("format(%d) = %q, want %q", tt.prec, got, tt.want)
			}
			if got := tt.s.percent(); got != tt.percent {
				t.Errorf("percent() = %q, want %q", got, tt.percent)
			}
		})
	}
}
