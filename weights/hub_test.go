package weights

import (
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const tinyConfig = `{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8,
 "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
 "vocab_size": 32, "max_position_embeddings": 64, "tie_word_embeddings": true}`

type fakeRepo struct {
	sha     string
	files   map[string][]byte
	lfs     map[string]bool // served through a redirect to /cdn/ like the Hub's LFS files
	private bool            // needs the token "tok"
}

// fakeHub imitates the parts of the Hugging Face Hub that Resolve uses, on
// loopback, and records every request.
type fakeHub struct {
	t     *testing.T
	srv   *httptest.Server
	repos map[string]*fakeRepo

	mu          sync.Mutex
	requests    []string        // "METHOD path"
	auth        []string        // Authorization header of each request
	ranges      []string        // Range header of each CDN GET
	cdnGets     int             // CDN GETs so far
	cut         func(n int) int // bytes to send before dropping the n-th CDN GET (1-based); <0: don't
	stall       func(n int) int // bytes to send before the n-th CDN GET goes silent; <0: don't
	ignoreRange bool
	corrupt     bool // serve LFS content with one byte flipped
}

// isolateHubEnv clears the environment that Resolve reads, so that the
// tests see neither the developer's cache nor their token.
func isolateHubEnv(t *testing.T) {
	t.Helper()
	for _, k := range []string{"HF_ENDPOINT", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE",
		"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"} {
		t.Setenv(k, "")
	}
	t.Setenv("HOME", t.TempDir())
}

func newFakeHub(t *testing.T, repos map[string]*fakeRepo) *fakeHub {
	isolateHubEnv(t)
	h := &fakeHub{t: t, repos: repos}
	h.srv = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *fakeHub) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.requests)
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func gitBlobSHA1(b []byte) string {
	s := sha1.Sum(append([]byte(fmt.Sprintf("blob %d\x00", len(b))), b...))
	return hex.EncodeToString(s[:])
}

func (h *fakeHub) serve(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.requests = append(h.requests, r.Method+" "+r.URL.Path)
	h.auth = append(h.auth, r.Header.Get("Authorization"))
	h.mu.Unlock()

	p := r.URL.Path
	if rest, ok := strings.CutPrefix(p, "/cdn/"); ok {
		h.serveCDN(w, r, rest)
		return
	}
	var repoID, tail string
	var api bool
	if rest, ok := strings.CutPrefix(p, "/api/models/"); ok {
		api = true
		parts := strings.SplitN(rest, "/", 4) // org, name, "revision", rev
		if len(parts) != 4 || parts[2] != "revision" {
			http.NotFound(w, r)
			return
		}
		repoID, tail = parts[0]+"/"+parts[1], parts[3]
	} else {
		parts := strings.SplitN(strings.TrimPrefix(p, "/"), "/", 5) // org, name, "resolve", sha, file
		if len(parts) != 5 || parts[2] != "resolve" {
			http.NotFound(w, r)
			return
		}
		repoID, tail = parts[0]+"/"+parts[1], parts[3]+"/"+parts[4]
	}
	repo := h.repos[repoID]
	if repo == nil || (repo.private && r.Header.Get("Authorization") != "Bearer tok") {
		// The Hub answers 401 for both, so as not to reveal private repos.
		w.Header().Set("X-Error-Message", "Repository not found")
		http.Error(w, "", http.StatusUnauthorized)
		return
	}
	if api {
		if tail != "main" && tail != repo.sha {
			w.Header().Set("X-Error-Message", "Revision Not Found")
			http.Error(w, "", http.StatusNotFound)
			return
		}
		var sib []map[string]string
		for f := range repo.files {
			sib = append(sib, map[string]string{"rfilename": f})
		}
		json.NewEncoder(w).Encode(map[string]any{"id": repoID, "sha": repo.sha, "siblings": sib})
		return
	}
	sha, file, _ := strings.Cut(tail, "/")
	data, ok := repo.files[file]
	if sha != repo.sha || !ok {
		w.Header().Set("X-Error-Message", "Entry not found")
		http.Error(w, "", http.StatusNotFound)
		return
	}
	if repo.lfs[file] {
		sum := sha256Hex(data)
		w.Header().Set("X-Linked-Etag", `"`+sum+`"`)
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(data)))
		w.Header().Set("Location", h.srv.URL+"/cdn/"+sum)
		w.WriteHeader(http.StatusFound)
		return
	}
	w.Header().Set("ETag", `"`+gitBlobSHA1(data)+`"`)
	http.ServeContent(w, r, file, time.Time{}, bytes.NewReader(data))
}

func (h *fakeHub) serveCDN(w http.ResponseWriter, r *http.Request, sum string) {
	var data []byte
	for _, repo := range h.repos {
		for _, d := range repo.files {
			if sha256Hex(d) == sum {
				data = d
			}
		}
	}
	if data == nil {
		http.NotFound(w, r)
		return
	}
	h.mu.Lock()
	corrupt, ignoreRange := h.corrupt, h.ignoreRange
	cutAt, stall := -1, false
	if r.Method == http.MethodGet {
		h.cdnGets++
		h.ranges = append(h.ranges, r.Header.Get("Range"))
		if h.cut != nil {
			cutAt = h.cut(h.cdnGets)
		}
		if h.stall != nil && cutAt < 0 {
			cutAt = h.stall(h.cdnGets)
			stall = cutAt >= 0
		}
	}
	h.mu.Unlock()
	if corrupt {
		data = bytes.Clone(data)
		data[len(data)/2] ^= 1
	}
	if ignoreRange {
		r.Header.Del("Range")
	}
	if cutAt < 0 {
		http.ServeContent(w, r, sum, time.Time{}, bytes.NewReader(data))
		return
	}
	// Promise the whole (remaining) body, send part of it, then drop the
	// line or go silent until the client gives up.
	start := 0
	if rg := r.Header.Get("Range"); rg != "" {
		start, _ = strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(rg, "bytes="), "-"))
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, len(data)-1, len(data)))
		w.Header().Set("Content-Length", strconv.Itoa(len(data)-start))
		w.WriteHeader(http.StatusPartialContent)
	} else {
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.WriteHeader(http.StatusOK)
	}
	w.Write(data[start:min(start+cutAt, len(data))])
	w.(http.Flusher).Flush()
	if stall {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second): // the client should have given up long ago
			h.t.Errorf("client still waiting on a stalled body after 10s")
		}
		return
	}
	panic(http.ErrAbortHandler)
}

// tinyRepo builds a repository holding a small valid model; sharded splits
// the weights over two files with an index.
func tinyRepo(t *testing.T, sharded bool) *fakeRepo {
	t.Helper()
	r := rand.New(rand.NewPCG(7, 8))
	dir := t.TempDir()
	emb := F32Tensor("model.embed_tokens.weight", []int{32, 8}, randVals(r, 256))
	big := F32Tensor("model.layers.0.mlp.up_proj.weight", []int{2048, 8}, randVals(r, 2048*8)) // 64 KiB
	norm := BF16Tensor("model.norm.weight", []int{8}, randVals(r, 8))
	repo := &fakeRepo{
		sha: "0123456789abcdef0123456789abcdef01234567",
		files: map[string][]byte{
			"config.json":            []byte(tinyConfig),
			"generation_config.json": []byte(`{"bos_token_id": 1, "eos_token_id": 2}`),
			"tokenizer.json":         []byte(`{"version": "1.0", "model": {"type": "BPE"}}`),
			"tokenizer_config.json":  []byte(`{}`),
			"README.md":              []byte("# tiny\n"),
			"pytorch_model.bin":      []byte("not fetched"),
		},
		lfs: map[string]bool{},
	}
	write := func(name string, ts ...Tensor) {
		p := filepath.Join(dir, name)
		if err := WriteFile(p, ts, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		repo.files[name] = b
		repo.lfs[name] = true
	}
	if !sharded {
		write("model.safetensors", emb, big, norm)
		return repo
	}
	s1, s2 := "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
	write(s1, emb, norm)
	write(s2, big)
	idx, _ := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 0}, "weight_map": map[string]string{
		"model.embed_tokens.weight": s1, "model.norm.weight": s1, "model.layers.0.mlp.up_proj.weight": s2,
	}})
	repo.files["model.safetensors.index.json"] = idx
	return repo
}

func (h *fakeHub) options(t *testing.T) HubOptions {
	return HubOptions{Endpoint: h.srv.URL, CacheDir: t.TempDir(), Client: h.srv.Client()}
}

// checkModelDir opens what Resolve returned and compares it with the repo.
func checkModelDir(t *testing.T, dir string, repo *fakeRepo) {
	t.Helper()
	for name, want := range repo.files {
		if name == "README.md" || name == "pytorch_model.bin" {
			if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
				t.Errorf("%s was downloaded but is not needed", name)
			}
			continue
		}
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: content differs (%d bytes, want %d)", name, len(got), len(want))
		}
	}
	if _, err := LoadConfig(dir); err != nil {
		t.Error(err)
	}
	st, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if n := len(st.Names()); n != 3 {
		t.Errorf("%d tensors, want 3", n)
	}
}

func TestResolveDownloadsThenUsesCache(t *testing.T) {
	for _, sharded := range []bool{false, true} {
		t.Run(fmt.Sprintf("sharded=%v", sharded), func(t *testing.T) {
			repo := tinyRepo(t, sharded)
			h := newFakeHub(t, map[string]*fakeRepo{"org/tiny": repo})
			opt := h.options(t)
			var progress bytes.Buffer
			opt.Progress = &progress

			dir, err := Resolve(context.Background(), "org/tiny", opt)
			if err != nil {
				t.Fatal(err)
			}
			repoDir := filepath.Join(opt.CacheDir, "models--org--tiny")
			if want := filepath.Join(repoDir, "snapshots", repo.sha); dir != want {
				t.Errorf("Resolve = %s, want %s", dir, want)
			}
			checkModelDir(t, dir, repo)

			// The huggingface_hub layout: relative symlinks into blobs named
			// by ETag, and refs/main holding the commit.
			weightsFile := "model.safetensors"
			if sharded {
				weightsFile = "model-00002-of-00002.safetensors"
			}
			for name, blob := range map[string]string{
				"config.json": gitBlobSHA1(repo.files["config.json"]),
				weightsFile:   sha256Hex(repo.files[weightsFile]),
			} {
				target, err := os.Readlink(filepath.Join(dir, name))
				if err != nil {
					t.Fatalf("%s is not a symlink: %v", name, err)
				}
				if want := filepath.Join("..", "..", "blobs", blob); target != want {
					t.Errorf("%s -> %s, want %s", name, target, want)
				}
			}
			if ref, err := os.ReadFile(filepath.Join(repoDir, "refs", "main")); err != nil || string(ref) != repo.sha {
				t.Errorf("refs/main = %q, %v; want %s", ref, err, repo.sha)
			}
			if m, _ := filepath.Glob(filepath.Join(repoDir, "blobs", "*.incomplete")); len(m) != 0 {
				t.Errorf("left over: %v", m)
			}
			out := progress.String()
			// Not a terminal: plain lines, no redraws.
			if strings.Contains(out, "\r") || !strings.Contains(out, weightsFile+" ") || !strings.Contains(out, "100.0%") {
				t.Errorf("progress output lacks a finished bar for %s: %q", weightsFile, out)
			}

			// Second time: from the cache, no network at all.
			n := h.count()
			again, err := Resolve(context.Background(), "org/tiny", opt)
			if err != nil || again != dir {
				t.Fatalf("second Resolve = %s, %v; want %s", again, err, dir)
			}
			if h.count() != n {
				t.Errorf("second Resolve made %d requests, want 0", h.count()-n)
			}
			h.srv.Close()
			opt.Offline = true
			if again, err := Resolve(context.Background(), "org/tiny", opt); err != nil || again != dir {
				t.Errorf("offline Resolve = %s, %v; want %s", again, err, dir)
			}
			// A commit revision needs no ref.
			opt.Revision = repo.sha
			if again, err := Resolve(context.Background(), "org/tiny", opt); err != nil || again != dir {
				t.Errorf("Resolve at commit = %s, %v; want %s", again, err, dir)
			}
		})
	}
}

func TestResolveResumesInterruptedDownload(t *testing.T) {
	repo := tinyRepo(t, false)
	size := len(repo.files["model.safetensors"])
	h := newFakeHub(t, map[string]*fakeRepo{"org/tiny": repo})
	h.cut = func(n int) int {
		if n == 1 {
			return 10000
		}
		return -1
	}
	opt := h.options(t)
	dir, err := Resolve(context.Background(), "org/tiny", opt)
	if err != nil {
		t.Fatal(err)
	}
	checkModelDir(t, dir, repo)
	if want := []string{"", "bytes=10000-"}; !reflect.DeepEqual(h.ranges, want) {
		t.Errorf("CDN Range headers %q, want %q (file of %d bytes)", h.ranges, want, size)
	}
}

func TestResolveResumesAcrossCalls(t *testing.T) {
	repo := tinyRepo(t, false)
	h := newFakeHub(t, map[string]*fakeRepo{"org/tiny": repo})
	h.cut = func(int) int { return 5000 } // every attempt breaks
	opt := h.options(t)
	_, err := Resolve(context.Background(), "org/tiny", opt)
	want := fmt.Sprintf("org/tiny: model.safetensors: giving up on %s after 3 attempts: transfer broken after 15000 of %d bytes", h.srv.URL, len(repo.files["model.safetensors"]))
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error = %v, want it to contain %q", err, want)
	}
	part := filepath.Join(opt.CacheDir, "models--org--tiny", "blobs", sha256Hex(repo.files["model.safetensors"])+".incomplete")
	if fi, err := os.Stat(part); err != nil || fi.Size() != 15000 {
		t.Fatalf("partial download: %v, %v; want 15000 bytes kept", fi, err)
	}

	h.mu.Lock()
	h.cut, h.ranges = nil, nil
	h.mu.Unlock()
	dir, err := Resolve(context.Background(), "org/tiny", opt)
	if err != nil {
		t.Fatal(err)
	}
	checkModelDir(t, dir, repo)
	if want := []string{"bytes=15000-"}; !reflect.DeepEqual(h.ranges, want) {
		t.Errorf("CDN Range headers %q, want %q", h.ranges, want)
	}
}

func TestResolveServerIgnoresRange(t *testing.T) {
	repo := tinyRepo(t, false)
	h := newFakeHub(t, map[string]*fakeRepo{"org/tiny": repo})
	h.ignoreRange = true
	opt := h.options(t)
	blobs := filepath.Join(opt.CacheDir, "models--org--tiny", "blobs")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		t.Fatal(err)
	}
	// A stale partial file that is not a prefix of the real one: a 200 reply
	// must replace it, not be appended to it.
	part := filepath.Join(blobs, sha256Hex(repo.files["model.safetensors"])+".incomplete")
	if err := os.WriteFile(part, bytes.Repeat([]byte{0xee}, 3000), 0o644); err != nil {
		t.Fatal(err)
	}
	dir, err := Resolve(context.Background(), "org/tiny", opt)
	if err != nil {
		t.Fatal(err)
	}
	checkModelDir(t, dir, repo)
	if want := []string{"bytes=3000-"}; !reflect.DeepEqual(h.ranges, want) {
		t.Errorf("CDN Range headers %q, want %q", h.ranges, want)
	}
}

func TestResolveChecksumMismatch(t *testing.T) {
	repo := tinyRepo(t, false)
	h := newFakeHub(t, map[string]*fakeRepo{"org/tiny": repo})
	h.corrupt = true
	opt := h.options(t)
	_, err := Resolve(context.Background(), "org/tiny", opt)
	if err == nil || !strings.Contains(err.Error(), "model.safetensors: checksum mismatch") {
		t.Fatalf("error = %v, want a checksum mismatch", err)
	}
	m, _ := filepath.Glob(filepath.Join(opt.CacheDir, "models--org--tiny", "blobs", "*"))
	for _, p := range m {
		if strings.HasSuffix(p, ".incomplete") || filepath.Base(p) == sha256Hex(repo.files["model.safetensors"]) {
			t.Errorf("corrupt download kept as %s", p)
		}
	}
}

func TestResolveErrors(t *testing.T) {
	repo := tinyRepo(t, false)
	priv := tinyRepo(t, false)
	priv.private = true
	noWeights := tinyRepo(t, false)
	delete(noWeights.files, "model.safetensors")
	h := newFakeHub(t, map[string]*fakeRepo{"org/tiny": repo, "org/private": priv, "org/noweights": noWeights})

	cases := []struct {
		name, repo, rev, token, want string
	}{
		{"missing repo", "org/nothere", "", "", "org/nothere: revision main: repository not found or requires HF_TOKEN (HTTP 401: Repository not found)"},
		{"private without token", "org/private", "", "", "requires HF_TOKEN (HTTP 401"},
		{"private with wrong token", "org/private", "", "nope", "HF_TOKEN has no access to it (HTTP 401"},
		{"missing revision", "org/tiny", "v9", "", "org/tiny: revision v9: not found (HTTP 404: Revision Not Found)"},
		{"no safetensors", "org/noweights", "", "", "has no model.safetensors or model.safetensors.index.json"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opt := h.options(t)
			opt.Revision, opt.Token = c.rev, c.token
			_, err := Resolve(context.Background(), c.repo, opt)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error = %v, want it to contain %q", err, c.want)
			}
		})
	}

	t.Run("token sent on every request", func(t *testing.T) {
		opt := h.options(t)
		opt.Token = "tok"
		start := h.count()
		dir, err := Resolve(context.Background(), "org/private", opt)
		if err != nil {
			t.Fatal(err)
		}
		checkModelDir(t, dir, priv)
		h.mu.Lock()
		defer h.mu.Unlock()
		for i := start; i < len(h.requests); i++ {
			if h.auth[i] != "Bearer tok" {
				t.Errorf("%s sent Authorization %q", h.requests[i], h.auth[i])
			}
		}
	})

	t.Run("offline and not cached", func(t *testing.T) {
		opt := h.options(t)
		opt.Offline = true
		start := h.count()
		_, err := Resolve(context.Background(), "org/tiny", opt)
		if err == nil || !strings.Contains(err.Error(), "not in the Hugging Face cache "+opt.CacheDir) || !strings.Contains(err.Error(), "offline") {
			t.Errorf("error = %v, want an offline cache miss", err)
		}
		if h.count() != start {
			t.Errorf("offline Resolve made %d requests", h.count()-start)
		}
	})
}

func TestResolveLocalAndNames(t *testing.T) {
	isolateHubEnv(t)
	dir := t.TempDir()
	if got, err := Resolve(context.Background(), dir, HubOptions{Offline: true}); err != nil || got != dir {
		t.Errorf("Resolve(dir) = %s, %v", got, err)
	}
	file := filepath.Join(dir, "config.json")
	os.WriteFile(file, []byte("{}"), 0o644)
	if _, err := Resolve(context.Background(), file, HubOptions{}); err == nil || !strings.Contains(err.Error(), "is a file") {
		t.Errorf("Resolve(file) error = %v", err)
	}
	cache := t.TempDir()
	cases := []struct {
		name, want string
	}{
		// Only a path: say the directory is missing, never ask the Hub.
		{"models/foo/bar", "weights: model directory models/foo/bar does not exist"},
		{"a/b/c", "weights: model directory a/b/c does not exist"},
		{"./models/foo", "weights: model directory ./models/foo does not exist"},
		{"../x/y", "weights: model directory ../x/y does not exist"},
		{"../x", "weights: model directory ../x does not exist"},
		{"/abs/path/none", "weights: model directory /abs/path/none does not exist"},
		{"~/models/x", "weights: model directory ~/models/x does not exist (a leading ~ is only expanded by a shell"},
		{"models/", "weights: model directory models/ does not exist"},
		// A repo id, not cached, offline: both readings fail.
		{"models/foo", "weights: no directory models/foo exists, and models/foo (revision main) is not in the Hugging Face cache " + cache + "; offline mode (HF_HUB_OFFLINE) forbids downloading it"},
		{"gpt2", "weights: no directory gpt2 exists, and gpt2 (revision main) is not in the Hugging Face cache"},
		// Neither.
		{"org/a--b", `weights: "org/a--b" is neither an existing model directory nor a Hugging Face repo id (org/name)`},
		{"org/a..b", `is neither an existing model directory nor a Hugging Face repo id`},
		{"", `weights: "" is neither an existing model directory nor a Hugging Face repo id`},
		{"models\\foo", `is neither an existing model directory nor a Hugging Face repo id`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Resolve(context.Background(), c.name, HubOptions{CacheDir: cache, Offline: true})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Resolve(%q) error = %v, want it to contain %q", c.name, err, c.want)
			}
		})
	}
	if _, err := Resolve(context.Background(), "org/x", HubOptions{CacheDir: dir, Revision: "../../etc"}); err == nil || !strings.Contains(err.Error(), "invalid revision") {
		t.Errorf("bad revision error = %v", err)
	}
}

func TestResolveMissingRepoNamesMissingDirectory(t *testing.T) {
	h := newFakeHub(t, map[string]*fakeRepo{"org/tiny": tinyRepo(t, false)})
	opt := h.options(t)
	_, err := Resolve(context.Background(), "models/foo", opt)
	want := "weights: models/foo: revision main: repository not found or requires HF_TOKEN (HTTP 401: Repository not found); no directory models/foo exists either"
	if err == nil || err.Error() != want {
		t.Errorf("error = %v, want %q", err, want)
	}
}

func TestResolveFillsOptionsFromEnvironment(t *testing.T) {
	repo := tinyRepo(t, false)
	h := newFakeHub(t, map[string]*fakeRepo{"org/private": repo})
	repo.private = true
	home := t.TempDir()
	t.Setenv("HF_HOME", home)
	t.Setenv("HF_ENDPOINT", h.srv.URL+"/")
	t.Setenv("HF_TOKEN", "tok")

	// HubOptions{}: endpoint, token and cache all from the environment.
	dir, err := Resolve(context.Background(), "org/private", HubOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(home, "hub", "models--org--private", "snapshots", repo.sha); dir != want {
		t.Errorf("Resolve = %s, want %s", dir, want)
	}
	checkModelDir(t, dir, repo)

	// Set fields win: another cache, and a token that gets a 401.
	other := t.TempDir()
	_, err = Resolve(context.Background(), "org/private", HubOptions{CacheDir: other, Token: "wrong"})
	if err == nil || !strings.Contains(err.Error(), "HF_TOKEN has no access to it (HTTP 401") {
		t.Errorf("explicit token: error = %v, want a 401 for the wrong token", err)
	}
	if _, err := os.Stat(filepath.Join(other, "models--org--private")); err == nil {
		t.Error("explicit CacheDir: nothing should be cached there after a 401")
	}
	// An explicit endpoint wins over HF_ENDPOINT: nothing listens there.
	_, err = Resolve(context.Background(), "org/private", HubOptions{CacheDir: other, Endpoint: "http://127.0.0.1:1", ConnectTimeout: time.Second})
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("explicit endpoint: error = %v, want it to name 127.0.0.1:1", err)
	}

	// HF_HUB_OFFLINE: the cached model resolves without the server, an
	// uncached one fails naming the cache HF_HOME implies.
	h.srv.Close()
	t.Setenv("HF_HUB_OFFLINE", "1")
	if again, err := Resolve(context.Background(), "org/private", HubOptions{}); err != nil || again != dir {
		t.Errorf("offline Resolve = %s, %v; want %s", again, err, dir)
	}
	_, err = Resolve(context.Background(), "org/other", HubOptions{})
	if want := "is not in the Hugging Face cache " + filepath.Join(home, "hub") + "; offline mode"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("offline miss: error = %v, want it to contain %q", err, want)
	}

	// HF_HUB_CACHE beats HF_HOME.
	t.Setenv("HF_HUB_CACHE", other)
	_, err = Resolve(context.Background(), "org/private", HubOptions{})
	if want := "not in the Hugging Face cache " + other; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("HF_HUB_CACHE: error = %v, want it to contain %q", err, want)
	}
}

func TestResolveReadsHuggingFaceHubCache(t *testing.T) {
	// A cache as huggingface_hub leaves it, but with plain files instead of
	// symlinks (as on file systems without them) and a sharded checkpoint.
	cache := t.TempDir()
	sha := "fedcba9876543210fedcba9876543210fedcba98"
	repoDir := filepath.Join(cache, "models--Qwen--Qwen2.5-0.5B")
	snap := filepath.Join(repoDir, "snapshots", sha)
	os.MkdirAll(snap, 0o755)
	os.MkdirAll(filepath.Join(repoDir, "refs"), 0o755)
	os.WriteFile(filepath.Join(repoDir, "refs", "main"), []byte(sha+"\n"), 0o644)
	os.WriteFile(filepath.Join(snap, "config.json"), []byte(qwen25_05B), 0o644)
	writeIndex(t, snap, map[string]string{"a": "model-00001-of-00001.safetensors"})
	opt := HubOptions{CacheDir: cache, Offline: true}

	if _, err := Resolve(context.Background(), "Qwen/Qwen2.5-0.5B", opt); err == nil {
		t.Fatal("Resolve succeeded with a shard missing from the snapshot")
	}
	if err := WriteFile(filepath.Join(snap, "model-00001-of-00001.safetensors"), []Tensor{F32Tensor("a", []int{1}, []float32{1})}, nil); err != nil {
		t.Fatal(err)
	}
	dir, err := Resolve(context.Background(), "Qwen/Qwen2.5-0.5B", opt)
	if err != nil || dir != snap {
		t.Fatalf("Resolve = %s, %v; want %s", dir, err, snap)
	}
	// A dangling symlink (blob deleted) makes the snapshot incomplete.
	os.Remove(filepath.Join(snap, "config.json"))
	os.Symlink(filepath.Join("..", "..", "blobs", "gone"), filepath.Join(snap, "config.json"))
	if _, err := Resolve(context.Background(), "Qwen/Qwen2.5-0.5B", opt); err == nil {
		t.Error("Resolve accepted a dangling config.json symlink")
	}
}

func TestHubOptionsFromEnvFunc(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want HubOptions
	}{
		{"defaults", map[string]string{"HOME": "/home/u"}, HubOptions{
			Endpoint: "https://huggingface.co", CacheDir: "/home/u/.cache/huggingface/hub"}},
		{"everything set", map[string]string{
			"HOME": "/home/u", "HF_ENDPOINT": "http://mirror.local/", "HF_TOKEN": "t1", "HUGGING_FACE_HUB_TOKEN": "t2",
			"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": "/c/hub", "HF_HOME": "/hfhome"}, HubOptions{
			Endpoint: "http://mirror.local", Token: "t1", CacheDir: "/c/hub", Offline: true}},
		{"legacy token, HF_HOME", map[string]string{"HUGGING_FACE_HUB_TOKEN": "t2", "HF_HOME": "/hfhome", "HF_HUB_OFFLINE": "TRUE"}, HubOptions{
			Endpoint: "https://huggingface.co", Token: "t2", CacheDir: "/hfhome/hub", Offline: true}},
		{"XDG cache", map[string]string{"HOME": "/home/u", "XDG_CACHE_HOME": "/xdg", "HF_HUB_OFFLINE": "0"}, HubOptions{
			Endpoint: "https://huggingface.co", CacheDir: "/xdg/huggingface/hub"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := HubOptionsFromEnvFunc(func(k string) string { return c.env[k] })
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestProgressBarThrottles(t *testing.T) {
	var out bytes.Buffer
	bar := newProgressBar(&out, "dir/model.safetensors", 1000, time.Hour)
	bar.tty = true
	for i := 0; i < 1000; i++ {
		bar.add(1)
	}
	bar.finish()
	s := out.String()
	if n := strings.Count(s, "\r"); n > 3 {
		t.Errorf("%d redraws for an instant download, want at most 3: %q", n, s)
	}
	if !strings.Contains(s, "model.safetensors") || !strings.Contains(s, "100.0%") || !strings.HasSuffix(s, "\n") {
		t.Errorf("final bar %q", s)
	}
}

func TestResolveConcurrentCallsShareOneDownload(t *testing.T) {
	repo := tinyRepo(t, false)
	h := newFakeHub(t, map[string]*fakeRepo{"org/tiny": repo})
	opt := h.options(t)
	var wg sync.WaitGroup
	dirs := make([]string, 4)
	errs := make([]error, 4)
	for i := range dirs {
		wg.Go(func() { dirs[i], errs[i] = Resolve(context.Background(), "org/tiny", opt) })
	}
	wg.Wait()
	for i := range dirs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		checkModelDir(t, dirs[i], repo)
	}
	if h.cdnGets != 1 {
		t.Errorf("%d downloads of the weights, want 1", h.cdnGets)
	}
}

// silentServer listens on loopback, accepts connections and never answers.
func silentServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

func TestResolveServerNeverAnswers(t *testing.T) {
	isolateHubEnv(t)
	addr := silentServer(t)
	// A server that sends the headers of the revision info, then nothing.
	halfway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"sha": "0123456789abcdef`)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}))
	defer halfway.Close()
	halfwayAddr := strings.TrimPrefix(halfway.URL, "http://")
	cases := []struct {
		name     string
		endpoint string
		client   *http.Client
		want     string
	}{
		{"http", "http://" + addr, nil,
			"weights: org/tiny: revision main: no response from " + addr + " within 200ms"},
		{"https: the TLS handshake hangs", "https://" + addr, nil,
			"weights: org/tiny: revision main: could not connect to " + addr + " within 200ms (TCP connect and TLS handshake)"},
		{"caller's client without timeouts", "http://" + addr, &http.Client{Transport: &http.Transport{}},
			"weights: org/tiny: revision main: no response from " + addr + " within 200ms"},
		{"revision info stalls", halfway.URL, nil,
			"weights: org/tiny: revision main: no data from " + halfwayAddr + " for 200ms"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opt := HubOptions{Endpoint: c.endpoint, CacheDir: t.TempDir(), Client: c.client,
				ConnectTimeout: 200 * time.Millisecond, HeaderTimeout: 200 * time.Millisecond, StallTimeout: 200 * time.Millisecond}
			start := time.Now()
			_, err := Resolve(context.Background(), "org/tiny", opt)
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("Resolve took %v", took)
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error = %v, want it to contain %q", err, c.want)
			}
		})
	}
}

func TestResolveStalledDownload(t *testing.T) {
	cases := []struct {
		name  string
		stall func(n int) int // see fakeHub.stall
		want  string          // "" for success; else the error after the host, "%d" the file size
		kept  int64           // bytes of the partial download left for the next run
	}{
		{name: "recovers", stall: func(n int) int {
			if n == 1 {
				return 10000
			}
			return -1
		}},
		{name: "stalls every time", stall: func(int) int { return 10000 },
			want: " for 200ms after 30000 of %d bytes; the 30000 bytes received are kept in ", kept: 30000},
		{name: "silent after the headers", stall: func(int) int { return 0 },
			want: " for 200ms after 0 of %d bytes", kept: 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			repo := tinyRepo(t, false)
			size := len(repo.files["model.safetensors"])
			h := newFakeHub(t, map[string]*fakeRepo{"org/tiny": repo})
			h.stall = c.stall
			opt := h.options(t)
			opt.StallTimeout = 200 * time.Millisecond
			var progress bytes.Buffer
			opt.Progress = &progress
			start := time.Now()
			dir, err := Resolve(context.Background(), "org/tiny", opt)
			if took := time.Since(start); took > 4*time.Second {
				t.Errorf("Resolve took %v", took)
			}
			host := strings.TrimPrefix(h.srv.URL, "http://")
			if !strings.Contains(progress.String(), "model.safetensors: no data from "+host+" for 200ms") ||
				!strings.Contains(progress.String(), "retrying (attempt 2 of 3)") {
				t.Errorf("progress output does not report the stall and the retry: %q", progress.String())
			}
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				checkModelDir(t, dir, repo)
				if want := []string{"", "bytes=10000-"}; !reflect.DeepEqual(h.ranges, want) {
					t.Errorf("CDN Range headers %q, want %q", h.ranges, want)
				}
				return
			}

			want := "weights: org/tiny: model.safetensors: giving up on " + h.srv.URL + " after 3 attempts: no data from " + host +
				fmt.Sprintf(c.want, size)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("error = %v, want it to contain %q", err, want)
			}
			// Nothing in the snapshot looks complete: no weights file, so
			// the cache does not offer the model.
			snap := filepath.Join(opt.CacheDir, "models--org--tiny", "snapshots", repo.sha)
			if _, err := os.Lstat(filepath.Join(snap, "model.safetensors")); err == nil {
				t.Error("a failed download left model.safetensors in the snapshot")
			}
			blob := filepath.Join(opt.CacheDir, "models--org--tiny", "blobs", sha256Hex(repo.files["model.safetensors"]))
			if _, err := os.Stat(blob); err == nil {
				t.Error("a failed download left a complete-looking blob")
			}
			if got := fileSize(blob + ".incomplete"); got != c.kept {
				t.Errorf("partial download holds %d bytes, want %d", got, c.kept)
			}
			offline := opt
			offline.Offline = true
			if _, err := Resolve(context.Background(), "org/tiny", offline); err == nil {
				t.Error("offline Resolve accepted the snapshot of a failed download")
			}

			// The server recovers: the next run resumes where this one stopped.
			h.mu.Lock()
			h.stall, h.ranges = nil, nil
			h.mu.Unlock()
			dir, err = Resolve(context.Background(), "org/tiny", opt)
			if err != nil {
				t.Fatal(err)
			}
			checkModelDir(t, dir, repo)
			wantRange := ""
			if c.kept > 0 {
				wantRange = fmt.Sprintf("bytes=%d-", c.kept)
			}
			if !reflect.DeepEqual(h.ranges, []string{wantRange}) {
				t.Errorf("CDN Range headers %q, want %q", h.ranges, wantRange)
			}
		})
	}
}

func TestProgressBarShowsStall(t *testing.T) {
	var out bytes.Buffer
	bar := newProgressBar(&out, "model.safetensors", 1000, 10*time.Millisecond)
	bar.tty = true
	bar.add(100)
	time.Sleep(150 * time.Millisecond) // no data: the ticker keeps drawing
	bar.note("model.safetensors: no data; retrying (attempt 2 of 3)")
	bar.add(900)
	bar.finish()
	s := out.String()
	for _, want := range []string{"10.0%", "no data for ", "\nmodel.safetensors: no data; retrying (attempt 2 of 3)\n", "100.0%"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q: %q", want, s)
		}
	}
	if n := strings.Count(s, "\r"); n < 4 {
		t.Errorf("%d drawings, want the idle bar redrawn: %q", n, s)
	}
	if !strings.HasSuffix(s, "\n") {
		t.Errorf("output does not end its line: %q", s)
	}
}

// Not on a terminal (a log file, CI): whole lines, one per tenth of the
// file and per ten heartbeats of waiting, never a \r redraw.
func TestProgressBarPlainLines(t *testing.T) {
	var out bytes.Buffer
	bar := newProgressBar(&out, "model.safetensors", 1000, 10*time.Millisecond)
	for range 1000 {
		bar.add(1)
	}
	time.Sleep(250 * time.Millisecond) // no data: a waiting line or two
	bar.finish()
	s := out.String()
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	if strings.Contains(s, "\r") || !strings.HasSuffix(s, "\n") || len(lines) < 2 || len(lines) > 14 {
		t.Errorf("%d lines, want a few whole ones: %q", len(lines), s)
	}
	if !strings.Contains(lines[len(lines)-1], "100.0%") {
		t.Errorf("last line %q, want the finished file", lines[len(lines)-1])
	}
}
