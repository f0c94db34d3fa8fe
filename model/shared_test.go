package model

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/internal/shareddata"
)

// reference reads a golden-logits file of the shared data set
// (reference/NAME): per line an input id then that position's logits.
func reference(t testing.TB, name string) (ids []int, rows [][]float32) {
	t.Helper()
	f, err := os.Open(shareddata.File(t, "reference", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) == 0 {
			continue
		}
		id, err := strconv.Atoi(fs[0])
		if err != nil {
			t.Fatalf("reference line %d: %v", len(ids)+1, err)
		}
		row := make([]float32, len(fs)-1)
		for i, s := range fs[1:] {
			v, err := strconv.ParseFloat(s, 32)
			if err != nil {
				t.Fatalf("reference line %d: %v", len(ids)+1, err)
			}
			row[i] = float32(v)
		}
		ids = append(ids, id)
		rows = append(rows, row)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return ids, rows
}
