package scheduler

import (
	"fmt"
	"slices"
)

// A Rank is what a Policy orders requests by.
type Rank struct {
	// Priority is Request.Priority: lower values are served first under
	// the priority policy.
	Priority int
	// Arrival numbers the requests in the order Submit took them, from 1.
	Arrival uint64
}

// A Policy orders the Scheduler's requests: the waiting are admitted in
// its order, as the pool has room, and when the pool must make room the
// running request last in its order is preempted first. The Scheduler
// owns the mechanism (the byte budget, the steps, the pool); a Policy
// only compares. Its methods must be quick and safe for concurrent use.
type Policy interface {
	// Name is how the policy is chosen (kakeya-serve --scheduling).
	Name() string
	// Before reports whether a request of rank a is served before one of
	// rank b. It must be a strict order; ties are broken by Arrival.
	Before(a, b Rank) bool
}

// FCFS serves requests in arrival order (first come, first served) and
// preempts the latest first: the default Policy. It ignores
// Request.Priority.
type FCFS struct{}

// Name returns "fcfs".
func (FCFS) Name() string { return "fcfs" }

// Before orders by arrival.
func (FCFS) Before(a, b Rank) bool { return a.Arrival < b.Arrival }

// PriorityPolicy serves requests by Request.Priority, lower values first
// and equal ones in arrival order, as vLLM's priority scheduling does;
// preemption takes the lowest priority (highest value), latest first.
type PriorityPolicy struct{}

// Name returns "priority".
func (PriorityPolicy) Name() string { return "priority" }

// Before orders by priority, then arrival.
func (PriorityPolicy) Before(a, b Rank) bool {
	if a.Priority != b.Priority {
		return a.Priority < b.Priority
	}
	return a.Arrival < b.Arrival
}

// Policies lists the names NewPolicy accepts.
func Policies() []string { return []string{"fcfs", "priority"} }

// NewPolicy returns the policy named name ("" is fcfs).
func NewPolicy(name string) (Policy, error) {
	switch name {
	case "", "fcfs":
		return FCFS{}, nil
	case "priority":
		return PriorityPolicy{}, nil
	}
	return nil, fmt.Errorf("scheduler: scheduling policy %q, want one of %v", name, Policies())
}

// rank returns h's rank.
func (h *Handle) rank() Rank { return Rank{Priority: h.req.Priority, Arrival: h.arrival} }

// insert puts h into list, kept in the policy's order.
func (s *Scheduler) insert(list []*Handle, h *Handle) []*Handle {
	i, _ := slices.BinarySearchFunc(list, h, func(x, h *Handle) int {
		switch {
		case s.policy.Before(x.rank(), h.rank()):
			return -1
		case s.policy.Before(h.rank(), x.rank()):
			return 1
		}
		return 0
	})
	return slices.Insert(list, i, h)
}
