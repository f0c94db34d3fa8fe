package scheduler

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// insert keeps the waiting and running lists in the policy's order: the
// head is admitted first, the tail preempted first (claim takes the last
// running request).
func TestPolicyOrder(t *testing.T) {
	type req struct {
		name     string
		priority int
	}
	in := []req{{"a", 5}, {"b", 0}, {"c", 5}, {"d", -1}, {"e", 0}} // in arrival order
	for _, tt := range []struct {
		policy Policy
		want   string // admission order; preemption takes it from the end
	}{
		{FCFS{}, "abcde"},
		{PriorityPolicy{}, "dbeac"},
	} {
		t.Run(tt.policy.Name(), func(t *testing.T) {
			s := &Scheduler{policy: tt.policy}
			var list []*Handle
			// Insert out of arrival order, as preemption re-queues.
			for _, i := range []int{2, 0, 4, 1, 3} {
				list = s.insert(list, &Handle{req: Request{Priority: in[i].priority}, arrival: uint64(i + 1)})
			}
			var got []byte
			for _, h := range list {
				got = append(got, in[h.arrival-1].name[0])
			}
			if string(got) != tt.want {
				t.Errorf("order %s, want %s", got, tt.want)
			}
		})
	}
	for _, name := range []string{"", "fcfs", "priority", "lifo"} {
		p, err := NewPolicy(name)
		if (err != nil) != (name == "lifo") {
			t.Errorf("NewPolicy(%q) = %v, %v", name, p, err)
		}
	}
}

// One request runs at a time: the three queued behind it are admitted
// in arrival order under FCFS and by priority (lower first) under the
// priority policy.
func TestPriorityAdmission(t *testing.T) {
	m := loadTiny(t)
	for _, tt := range []struct {
		policy Policy
		want   []string
	}{
		{nil, []string{"low", "high", "mid"}},
		{PriorityPolicy{}, []string{"high", "mid", "low"}},
	} {
		s, err := New(Config{Model: m, KVMemory: 64 << 20, MaxRunning: 1, Policy: tt.policy})
		if err != nil {
			t.Fatal(err)
		}
		release := make(chan struct{})
		var mu sync.Mutex
		var order []string
		next := func(name string) func([]float32, []int) (int, bool, error) {
			first := true
			return func(logits []float32, h []int) (int, bool, error) {
				if first {
					first = false
					mu.Lock()
					order = append(order, name)
					mu.Unlock()
					if name == "blocker" {
						<-release // the others queue meanwhile
					}
				}
				return greedy(-1)(logits, h)
			}
		}
		ctx := context.Background()
		hs := []*Handle{}
		submit := func(name string, priority int) {
			h, err := s.Submit(ctx, Request{Prompt: []int{1, 2, 3}, MaxNew: 3, Next: next(name), Priority: priority})
			if err != nil {
				t.Fatal(err)
			}
			hs = append(hs, h)
		}
		submit("blocker", 0)
		for {
			mu.Lock()
			started := len(order) > 0
			mu.Unlock()
			if started {
				break
			}
			time.Sleep(time.Millisecond)
		}
		submit("low", 5)
		submit("high", -2)
		submit("mid", 1)
		close(release)
		for _, h := range hs {
			if _, _, err := collect(ctx, h); err != nil {
				t.Fatal(err)
			}
		}
		s.Close()
		if got := order[1:]; !slices.Equal(got, tt.want) {
			t.Errorf("policy %v: admitted %v, want %v", tt.policy, got, tt.want)
		}
	}
}
