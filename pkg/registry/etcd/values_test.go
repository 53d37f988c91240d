package etcd

import (
	"slices"
	"testing"
)

func TestRangeBuilder(t *testing.T) {
	type in struct {
		key    string
		needed bool
	}
	for _, tc := range []struct {
		name string
		page int
		keys []in
		want []keyRange
	}{
		{"none needed", 2, []in{{"a", false}, {"b", false}}, nil},
		{"runs split by a key not needed", 10, []in{{"a", true}, {"b", true}, {"c", false}, {"d", true}},
			[]keyRange{{"a", "b\x00", 2}, {"d", "d\x00", 1}}},
		{"runs cut at a page", 2, []in{{"a", true}, {"b", true}, {"c", true}},
			[]keyRange{{"a", "b\x00", 2}, {"c", "c\x00", 1}}},
		{"a closing mark alone", 10, []in{{"a", true}, {"", false}, {"b", true}},
			[]keyRange{{"a", "a\x00", 1}, {"b", "b\x00", 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := rangeBuilder{page: tc.page}
			n := 0
			for _, k := range tc.keys {
				b.add(k.key, k.needed)
				if k.needed {
					n++
				}
			}
			if !slices.Equal(b.ranges, tc.want) {
				t.Errorf("ranges %+v, want %+v", b.ranges, tc.want)
			}
			if b.keys() != n {
				t.Errorf("keys() = %d, want %d", b.keys(), n)
			}
		})
	}
}

func TestParent(t *testing.T) {
	if got := parent("/p/set/clusters/a/exports/ns/web"); got != "/p/set/clusters/a/exports/ns/" {
		t.Errorf("parent = %q", got)
	}
}
