package model_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/kakeya-ai/kakeya/compute/cpubackend"
	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/pick"
)

// Greedy decoding with stories260K from the shared data set.
func Example() {
	// The shared data set: $KAKEYA_SHARED, else beside the repository.
	shared := os.Getenv("KAKEYA_SHARED")
	if shared == "" {
		shared = filepath.Join("..", "..", "shared")
	}
	dir := filepath.Join(shared, "models", "stories260K")
	// The model runs on the backend it is given: here the CPU's, with two
	// threads and its default matmul precision.
	be, err := cpubackend.NewMatMul(2, "")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer be.Close()
	m, err := model.Load(dir, model.Options{Backend: be})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Close()
	s, err := m.NewSequence()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()

	// BOS and "Once upon a time" in the model's tokenizer.
	ids := []int{1, 403, 407, 261, 378}
	logits, err := s.Forward(ids, false)
	for i := 0; i < 5 && err == nil; i++ {
		next := pick.ArgMax(logits)
		ids = append(ids, next)
		logits, err = s.Forward([]int{next}, false)
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(ids, s.Len())
	// Output:
	// [1 403 407 261 378 432 383 286 261 376] 10
}
