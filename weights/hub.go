package weights

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kakeya-ai/kakeya/internal/outfile"

	"github.com/kakeya-ai/kakeya/internal/boundedfile"
)

// HubOptions says where and how Resolve finds models on the Hugging Face Hub.
// Resolve fills the fields left at their zero value from the environment as
// HubOptionsFromEnv reads it, so HubOptions{} behaves like the tools; a field
// that is set wins over the environment. (Offline can only be turned on
// that way: HF_HUB_OFFLINE=1 makes even Offline: false offline.)
type HubOptions struct {
	Endpoint string       // Hub base URL; empty: HF_ENDPOINT, else https://huggingface.co
	Token    string       // access token sent as a Bearer token; empty: HF_TOKEN, else anonymous
	CacheDir string       // hub cache root (the layout huggingface_hub uses); empty: HF_HUB_CACHE, else $HF_HOME/hub, ...
	Revision string       // branch, tag or commit; empty: main
	Offline  bool         // never touch the network; false: as HF_HUB_OFFLINE says
	Progress io.Writer    // download progress bars; nil: silent
	Client   *http.Client // nil: a client of Resolve's own; the timeouts below apply to any client

	// Every request is bounded by these timeouts (zero or negative: the
	// default in parentheses), so a download never hangs. A body that
	// stalls is abandoned and the download resumed from the byte reached,
	// a few times, before Resolve fails.
	ConnectTimeout time.Duration // opening each connection, TLS handshake included (30s)
	HeaderTimeout  time.Duration // from a connection to the response headers (30s)
	StallTimeout   time.Duration // the longest wait for more of a response body (60s)
}

// Defaults of the HubOptions timeouts.
const (
	DefaultConnectTimeout = 30 * time.Second
	DefaultHeaderTimeout  = 30 * time.Second
	DefaultStallTimeout   = 60 * time.Second
)

// withEnv returns o with its unset fields filled from the environment that
// getenv reads.
func (o HubOptions) withEnv(getenv func(string) string) HubOptions {
	env := HubOptionsFromEnvFunc(getenv)
	if o.Endpoint == "" {
		o.Endpoint = env.Endpoint
	}
	if o.Token == "" {
		o.Token = env.Token
	}
	if o.CacheDir == "" {
		o.CacheDir = env.CacheDir
	}
	o.Offline = o.Offline || env.Offline
	return o
}

// HubOptionsFromEnv reads the huggingface_hub environment variables of this
// process; see HubOptionsFromEnvFunc.
func HubOptionsFromEnv() HubOptions { return HubOptionsFromEnvFunc(os.Getenv) }

// HubOptionsFromEnvFunc builds options from environment lookups through
// getenv: HF_ENDPOINT, HF_TOKEN (or HUGGING_FACE_HUB_TOKEN), HF_HUB_OFFLINE,
// and the cache at HF_HUB_CACHE, else $HF_HOME/hub, else
// $XDG_CACHE_HOME/huggingface/hub, else $HOME/.cache/huggingface/hub.
func HubOptionsFromEnvFunc(getenv func(string) string) HubOptions {
	opt := HubOptions{
		Endpoint: strings.TrimRight(getenv("HF_ENDPOINT"), "/"),
		Token:    getenv("HF_TOKEN"),
		CacheDir: getenv("HF_HUB_CACHE"),
	}
	if opt.Endpoint == "" {
		opt.Endpoint = "https://huggingface.co"
	}
	if opt.Token == "" {
		opt.Token = getenv("HUGGING_FACE_HUB_TOKEN")
	}
	switch strings.ToLower(strings.TrimSpace(getenv("HF_HUB_OFFLINE"))) {
	case "1", "true", "yes", "on":
		opt.Offline = true
	}
	if opt.CacheDir == "" {
		opt.CacheDir = getenv("HUGGINGFACE_HUB_CACHE") // older name
	}
	if opt.CacheDir == "" {
		home := getenv("HF_HOME")
		if home == "" {
			if xdg := getenv("XDG_CACHE_HOME"); xdg != "" {
				home = filepath.Join(xdg, "huggingface")
			} else if h := getenv("HOME"); h != "" {
				home = filepath.Join(h, ".cache", "huggingface")
			}
		}
		if home != "" {
			opt.CacheDir = filepath.Join(home, "hub")
		}
	}
	return opt
}

// Hub repository ids: an optional namespace and a name of letters, digits,
// '.', '_' and '-', with no "--" or ".." (which the cache layout reserves).
var repoIDPattern = regexp.MustCompile(`^(?:[A-Za-z0-9][A-Za-z0-9._-]{0,95}/)?[A-Za-z0-9][A-Za-z0-9._-]{0,95}$`)

var commitPattern = regexp.MustCompile(`^[0-9a-f]{40}$`)

// Files fetched besides the weights, when the repository has them.
var hubSideFiles = []string{"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}

// downloadAttempts bounds retries of one file after network failures; each
// retry resumes where the previous attempt stopped.
const downloadAttempts = 3

// Resolve returns a local model directory for nameOrDir: an existing
// directory as is, else a Hugging Face repo id ("org/name") looked up in the
// cache and, unless offline, downloaded into it. A cached snapshot that has
// config.json and its safetensors is used without any network access. A
// name that can only be a path (it starts with "/", "./", "../" or "~", or
// has more than one "/") and names no directory fails at once, saying so.
//
// Fields of opt left unset come from the environment (see HubOptions).
// Downloads go through the cache's blob store and appear in the snapshot
// only once complete and verified; an interrupted one is resumed by the next
// call.
func Resolve(ctx context.Context, nameOrDir string, opt HubOptions) (string, error) {
	fi, err := os.Stat(nameOrDir)
	switch {
	case err == nil && fi.IsDir():
		return nameOrDir, nil
	case err == nil && IsGGUF(nameOrDir):
		return nameOrDir, nil
	case err == nil:
		return "", fmt.Errorf("weights: %s is a file, not a model directory or a .gguf file", nameOrDir)
	case errors.Is(err, fs.ErrPermission):
		return "", fmt.Errorf("weights: model directory %w", err)
	}
	if looksLikePath(nameOrDir) {
		hint := ""
		if strings.HasPrefix(nameOrDir, "~") {
			hint = " (a leading ~ is only expanded by a shell, and not inside quotes)"
		}
		return "", fmt.Errorf("weights: model directory %s does not exist%s", nameOrDir, hint)
	}
	repo := nameOrDir
	if !repoIDPattern.MatchString(repo) || strings.Contains(repo, "--") || strings.Contains(repo, "..") {
		return "", fmt.Errorf("weights: %q is neither an existing model directory nor a Hugging Face repo id (org/name)", nameOrDir)
	}
	opt = opt.withEnv(os.Getenv)
	rev := opt.Revision
	if rev == "" {
		rev = "main"
	}
	if !filepath.IsLocal(rev) || strings.ContainsAny(rev, `\:`) {
		return "", fmt.Errorf("weights: %s: invalid revision %q", repo, rev)
	}
	if opt.CacheDir == "" {
		return "", fmt.Errorf("weights: no directory %s exists, and there is no Hugging Face cache to look it up in (set HF_HUB_CACHE, HF_HOME or HOME)", repo)
	}
	repoDir := filepath.Join(opt.CacheDir, "models--"+strings.ReplaceAll(repo, "/", "--"))
	if snap, ok := cachedSnapshot(repoDir, rev); ok {
		return snap, nil
	}
	if opt.Offline {
		return "", fmt.Errorf("weights: no directory %s exists, and %s (revision %s) is not in the Hugging Face cache %s; offline mode (HF_HUB_OFFLINE) forbids downloading it",
			repo, repo, rev, opt.CacheDir)
	}
	h := &hub{opt: opt, repo: repo, rev: rev, repoDir: repoDir,
		connect: orDefault(opt.ConnectTimeout, DefaultConnectTimeout),
		header:  orDefault(opt.HeaderTimeout, DefaultHeaderTimeout),
		stall:   orDefault(opt.StallTimeout, DefaultStallTimeout),
	}
	if h.opt.Client == nil {
		t := newTransport(h.connect, h.header)
		defer t.CloseIdleConnections()
		h.opt.Client = &http.Client{Transport: t}
	}
	if h.opt.Endpoint == "" {
		h.opt.Endpoint = "https://huggingface.co"
	}
	h.opt.Endpoint = strings.TrimRight(h.opt.Endpoint, "/")
	return h.download(ctx)
}

// looksLikePath reports whether name can only be meant as a file system
// path, not as a Hugging Face repo id.
func looksLikePath(name string) bool {
	for _, p := range []string{"./", "../", "/", "~"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return name == "." || name == ".." || filepath.IsAbs(name) || filepath.VolumeName(name) != "" ||
		strings.Count(name, "/") > 1 || strings.HasSuffix(name, "/") ||
		(filepath.Separator != '/' && strings.ContainsRune(name, filepath.Separator))
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// newTransport returns a transport like http.DefaultTransport (proxies from
// the environment, HTTP/2) whose connections and responses are bounded by
// the hub timeouts; the watchdog of each request enforces them too, with
// errors that say what timed out.
func newTransport(connect, header time.Duration) *http.Transport {
	var t *http.Transport
	if dt, ok := http.DefaultTransport.(*http.Transport); ok {
		t = dt.Clone()
	} else {
		t = &http.Transport{Proxy: http.ProxyFromEnvironment, ForceAttemptHTTP2: true, IdleConnTimeout: 90 * time.Second}
	}
	d := &net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}
	t.DialContext = d.DialContext
	t.TLSHandshakeTimeout = connect
	t.ResponseHeaderTimeout = header
	return t
}

// cachedSnapshot finds the snapshot of rev under repoDir and reports whether
// it holds a usable model: config.json plus model.safetensors or an index
// with all its shards. Snapshot entries may be symlinks into blobs/ (as
// huggingface_hub writes them) or plain files.
func cachedSnapshot(repoDir, rev string) (string, bool) {
	commit := rev
	if !commitPattern.MatchString(rev) {
		b, err := boundedfile.Read(filepath.Join(repoDir, "refs", filepath.FromSlash(rev)), maxRefBytes)
		if err != nil {
			return "", false
		}
		commit = strings.TrimSpace(string(b))
		if !commitPattern.MatchString(commit) {
			return "", false
		}
	}
	snap := filepath.Join(repoDir, "snapshots", commit)
	if !isFile(filepath.Join(snap, "config.json")) {
		return "", false
	}
	if isFile(filepath.Join(snap, "model.safetensors")) {
		return snap, true
	}
	shards, err := indexShards(filepath.Join(snap, "model.safetensors.index.json"))
	if err != nil {
		return "", false
	}
	for _, s := range shards {
		if !isFile(filepath.Join(snap, filepath.FromSlash(s))) {
			return "", false
		}
	}
	return snap, true
}

func isFile(p string) bool {
	fi, err := os.Stat(p) // follows symlinks: a dangling one is no file
	return err == nil && fi.Mode().IsRegular()
}

// indexShards returns the sorted distinct shard names of an index file.
func indexShards(index string) ([]string, error) {
	b, err := boundedfile.Read(index, MaxIndexBytes)
	if err != nil {
		return nil, err
	}
	var idx indexFile
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("%s: invalid JSON: %v", index, err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("%s: weight_map is missing or empty", index)
	}
	seen := map[string]bool{}
	var shards []string
	for name, s := range idx.WeightMap {
		if !filepath.IsLocal(s) || strings.Contains(s, `\`) {
			return nil, fmt.Errorf("%s: tensor %q: shard name %q leaves the model directory", index, name, s)
		}
		if !seen[s] {
			seen[s] = true
			shards = append(shards, s)
		}
	}
	sort.Strings(shards)
	return shards, nil
}

// hub is one Resolve download.
type hub struct {
	opt     HubOptions
	repo    string
	rev     string
	repoDir string

	connect, header, stall time.Duration // the HubOptions timeouts, defaults applied
}

func (h *hub) errorf(format string, args ...any) error {
	return fmt.Errorf("weights: %s: "+format, append([]any{h.repo}, args...)...)
}

func (h *hub) download(ctx context.Context) (string, error) {
	sha, listed, err := h.revisionInfo(ctx)
	if err != nil {
		return "", err
	}
	snap := filepath.Join(h.repoDir, "snapshots", sha)
	if !listed["config.json"] {
		return "", h.errorf("revision %s has no config.json", h.rev)
	}
	// Small files first, weights last: a snapshot with its weights in place
	// then also has everything else.
	for _, f := range hubSideFiles {
		if listed[f] {
			if err := h.fetch(ctx, sha, f); err != nil {
				return "", err
			}
		}
	}
	switch {
	case listed["model.safetensors"]:
		if err := h.fetch(ctx, sha, "model.safetensors"); err != nil {
			return "", err
		}
	case listed["model.safetensors.index.json"]:
		const index = "model.safetensors.index.json"
		if err := h.fetch(ctx, sha, index); err != nil {
			return "", err
		}
		shards, err := indexShards(filepath.Join(snap, index))
		if err != nil {
			return "", fmt.Errorf("weights: %w", err)
		}
		for _, s := range shards {
			if err := h.fetch(ctx, sha, s); err != nil {
				return "", err
			}
		}
	default:
		return "", h.errorf("revision %s has no model.safetensors or model.safetensors.index.json (only safetensors checkpoints are supported)", h.rev)
	}
	if h.rev != sha {
		ref := filepath.Join(h.repoDir, "refs", filepath.FromSlash(h.rev))
		if err := os.MkdirAll(filepath.Dir(ref), 0o755); err != nil {
			return "", fmt.Errorf("weights: %w", err)
		}
		if err := outfile.WriteFile(ref, []byte(sha)); err != nil {
			return "", fmt.Errorf("weights: %w", err)
		}
	}
	return snap, nil
}

func (h *hub) newRequest(ctx context.Context, method, u string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, h.errorf("%v", err)
	}
	if h.opt.Token != "" {
		req.Header.Set("Authorization", "Bearer "+h.opt.Token)
	}
	req.Header.Set("User-Agent", "kakeya")
	// Sizes and checksums describe the stored bytes; a transparently
	// decompressed body would match neither.
	req.Header.Set("Accept-Encoding", "identity")
	return req, nil
}

// statusError turns a failed HTTP response into an error saying what the
// user can do about it.
func (h *hub) statusError(resp *http.Response, what string) error {
	detail := errorDetail(resp)
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		if h.opt.Token == "" {
			return h.errorf("%s: repository not found or requires HF_TOKEN (HTTP %d%s)", what, resp.StatusCode, detail)
		}
		return h.errorf("%s: repository not found or HF_TOKEN has no access to it (HTTP %d%s)", what, resp.StatusCode, detail)
	case http.StatusNotFound:
		return h.errorf("%s: not found (HTTP 404%s)", what, detail)
	}
	return h.errorf("%s: HTTP %s%s", what, resp.Status, detail)
}

// errorDetail returns ": " and the Hub's explanation of a failed response,
// or "" when it gives none.
func errorDetail(resp *http.Response) string {
	if d := resp.Header.Get("X-Error-Message"); d != "" {
		return ": " + d
	}
	return ""
}

// revisionInfo asks the Hub for the commit a revision names and its files.
func (h *hub) revisionInfo(ctx context.Context) (string, map[string]bool, error) {
	u := h.opt.Endpoint + "/api/models/" + h.repo + "/revision/" + url.PathEscape(h.rev)
	req, err := h.newRequest(ctx, http.MethodGet, u)
	if err != nil {
		return "", nil, err
	}
	resp, err := h.send(h.opt.Client, req)
	if err != nil {
		return "", nil, h.errorf("revision %s: %v", h.rev, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		err := h.statusError(resp, "revision "+h.rev)
		switch resp.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
			if h.opt.Revision == "" { // the repository, not a revision of it, is missing
				err = fmt.Errorf("%w; no directory %s exists either", err, h.repo)
			}
		}
		return "", nil, err
	}
	var info struct {
		SHA      string `json:"sha"`
		Siblings []struct {
			RFilename string `json:"rfilename"`
		} `json:"siblings"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&info); err != nil {
		var te *timeoutError
		if errors.As(err, &te) {
			return "", nil, h.errorf("revision %s: %v", h.rev, te)
		}
		return "", nil, h.errorf("revision %s: invalid response from %s: %v", h.rev, u, err)
	}
	if !commitPattern.MatchString(info.SHA) {
		return "", nil, h.errorf("revision %s: response from %s has no valid commit sha (got %q)", h.rev, u, info.SHA)
	}
	listed := make(map[string]bool, len(info.Siblings))
	for _, s := range info.Siblings {
		listed[s.RFilename] = true
	}
	return info.SHA, listed, nil
}

func (h *hub) fileURL(sha, file string) string {
	segs := strings.Split(file, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return h.opt.Endpoint + "/" + h.repo + "/resolve/" + sha + "/" + strings.Join(segs, "/")
}

// fetch makes snapshots/sha/file point at a complete blob, downloading it
// unless the snapshot or the blob store already has it.
func (h *hub) fetch(ctx context.Context, sha, file string) error {
	if !filepath.IsLocal(file) || strings.Contains(file, `\`) {
		return h.errorf("file name %q leaves the repository", file)
	}
	dst := filepath.Join(h.repoDir, "snapshots", sha, filepath.FromSlash(file))
	if isFile(dst) {
		return nil
	}
	u := h.fileURL(sha, file)
	etag, size, err := h.head(ctx, u, file)
	if err != nil {
		return err
	}
	blobs := filepath.Join(h.repoDir, "blobs")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return fmt.Errorf("weights: %w", err)
	}
	name := blobName(etag, u)
	blob := filepath.Join(blobs, name)
	// Where huggingface_hub keeps its locks, so it and we exclude each other.
	locks := filepath.Join(filepath.Dir(h.repoDir), ".locks", filepath.Base(h.repoDir))
	if err := os.MkdirAll(locks, 0o755); err != nil {
		return fmt.Errorf("weights: %w", err)
	}
	unlock, err := lockFile(filepath.Join(locks, name+".lock"))
	if err != nil {
		return fmt.Errorf("weights: %w", err)
	}
	defer unlock()
	// Checked under the lock: another process may just have finished it.
	if fi, err := os.Stat(blob); err != nil || (size >= 0 && fi.Size() != size) {
		if err := h.downloadBlob(ctx, u, file, blob, etag, size); err != nil {
			return err
		}
	}
	return linkBlob(blob, dst)
}

var etagPattern = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$`)

// blobName names a blob by its ETag like huggingface_hub (git sha1 for
// small files, sha256 for LFS files), or by the URL when the server gives
// no usable ETag.
func blobName(etag, u string) string {
	if etagPattern.MatchString(etag) {
		return etag
	}
	sum := sha256.Sum256([]byte(u))
	return "url-" + hex.EncodeToString(sum[:])
}

// head learns a file's ETag and size. The Hub answers LFS files with a
// redirect to a CDN whose headers do not describe the file, so redirects are
// not followed, except relative ones (a renamed repository).
func (h *hub) head(ctx context.Context, u, file string) (etag string, size int64, err error) {
	client := *h.opt.Client
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	for hops := 0; ; hops++ {
		req, err := h.newRequest(ctx, http.MethodHead, u)
		if err != nil {
			return "", 0, err
		}
		resp, err := h.send(&client, req)
		if err != nil {
			return "", 0, h.errorf("%s: %v", file, err)
		}
		resp.Body.Close()
		etag = resp.Header.Get("X-Linked-Etag")
		if etag == "" {
			etag = resp.Header.Get("ETag")
		}
		etag = strings.Trim(strings.TrimPrefix(etag, "W/"), `"`)
		isRedirect := resp.StatusCode >= 300 && resp.StatusCode < 400
		if isRedirect && resp.Header.Get("X-Linked-Etag") == "" {
			loc, err := url.Parse(resp.Header.Get("Location"))
			if err == nil && loc.Host == "" && loc.Path != "" && hops < 5 {
				base, _ := url.Parse(u)
				u = base.ResolveReference(loc).String()
				continue
			}
		}
		if !isRedirect && resp.StatusCode != http.StatusOK {
			return "", 0, h.statusError(resp, file)
		}
		size = -1
		if s := resp.Header.Get("X-Linked-Size"); s != "" {
			if size, err = strconv.ParseInt(s, 10, 64); err != nil || size < 0 {
				return "", 0, h.errorf("%s: invalid X-Linked-Size %q", file, s)
			}
		} else if !isRedirect && resp.ContentLength >= 0 {
			size = resp.ContentLength
		}
		return etag, size, nil
	}
}

// retryable marks failures a new attempt may get past: broken or stalled
// connections and server-side errors. Its error does not name the
// repository or file; downloadBlob adds them.
type retryable struct{ err error }

func (r retryable) Error() string { return r.err.Error() }
func (r retryable) Unwrap() error { return r.err }

// downloadBlob downloads u into blob through blob.incomplete, resuming a
// previous partial download, retrying broken and stalled transfers, and
// checking the size and (for LFS files, whose ETag is their sha256) the
// checksum. The blob appears only once complete and verified.
func (h *hub) downloadBlob(ctx context.Context, u, file, blob, etag string, size int64) error {
	part := blob + ".incomplete"
	bar := newProgressBar(h.opt.Progress, file, size, min(time.Second, h.stall/4))
	defer bar.finish()
	var err error
	for attempt := 1; ; attempt++ {
		before := fileSize(part)
		err = h.getOnce(ctx, u, file, part, size, bar)
		var r retryable
		if err == nil || !errors.As(err, &r) {
			break
		}
		if ctx.Err() != nil {
			return h.errorf("%s: %v", file, ctx.Err())
		}
		if attempt == downloadAttempts {
			kept := ""
			if n := fileSize(part); n > 0 {
				kept = fmt.Sprintf("; the %d bytes received are kept in %s and the next run resumes from there", n, part)
			}
			return h.errorf("%s: giving up on %s after %d attempts: %v%s", file, h.opt.Endpoint, attempt, r.err, kept)
		}
		bar.note(fmt.Sprintf("%s: %v; retrying (attempt %d of %d)", file, r.err, attempt+1, downloadAttempts))
		if fileSize(part) <= before { // no progress: back off before retrying
			select {
			case <-ctx.Done():
				return h.errorf("%s: %v", file, ctx.Err())
			case <-time.After(min(time.Duration(attempt)*500*time.Millisecond, h.stall)):
			}
		}
	}
	if err != nil {
		return err
	}
	got := fileSize(part)
	if size >= 0 && got != size {
		return h.errorf("%s: downloaded %d bytes, expected %d", file, got, size)
	}
	if isSHA256(etag) {
		sum, err := fileSHA256(part)
		if err != nil {
			return fmt.Errorf("weights: %w", err)
		}
		if sum != etag {
			os.Remove(part)
			return h.errorf("%s: checksum mismatch: sha256 %s, expected %s (partial download removed)", file, sum, etag)
		}
	}
	if err := os.Rename(part, blob); err != nil {
		return fmt.Errorf("weights: %w", err)
	}
	return nil
}

func fileSize(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func isSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}

func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	hsh := sha256.New()
	if _, err := io.Copy(hsh, f); err != nil {
		return "", fmt.Errorf("%s: %w", p, err)
	}
	return hex.EncodeToString(hsh.Sum(nil)), nil
}

// getOnce makes one GET, continuing part with a Range request when it holds
// a prefix already.
func (h *hub) getOnce(ctx context.Context, u, file, part string, size int64, bar *progressBar) error {
	f, err := os.OpenFile(part, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("weights: %w", err)
	}
	defer f.Close()
	have, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Errorf("weights: %s: %w", part, err)
	}
	if size >= 0 && have > size {
		have = 0 // not a prefix of this file: start over
	}
	if size >= 0 && have == size {
		return nil
	}
	req, err := h.newRequest(ctx, http.MethodGet, u)
	if err != nil {
		return err
	}
	if have > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", have))
	}
	resp, err := h.send(h.opt.Client, req)
	if err != nil {
		return retryable{err}
	}
	defer resp.Body.Close()

	switch resp.StatusCode {
	case http.StatusOK: // whole file, whether or not we asked for a range
		have = 0
		if size >= 0 && resp.ContentLength >= 0 && resp.ContentLength != size {
			return h.errorf("%s: server sends %d bytes, expected %d", file, resp.ContentLength, size)
		}
	case http.StatusPartialContent:
		start, total, ok := parseContentRange(resp.Header.Get("Content-Range"))
		if !ok || start != have || (size >= 0 && total >= 0 && total != size) {
			// Not the continuation we asked for: drop the partial file and
			// let the next attempt fetch it whole.
			f.Truncate(0)
			return retryable{fmt.Errorf("unexpected Content-Range %q for a request from byte %d", resp.Header.Get("Content-Range"), have)}
		}
	case http.StatusRequestedRangeNotSatisfiable:
		f.Truncate(0)
		return retryable{fmt.Errorf("server refused to resume at byte %d", have)}
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout, http.StatusInternalServerError:
		return retryable{fmt.Errorf("HTTP %s%s", resp.Status, errorDetail(resp))}
	default:
		return h.statusError(resp, file)
	}
	if err := f.Truncate(have); err != nil {
		return fmt.Errorf("weights: %s: %w", part, err)
	}
	if _, err := f.Seek(have, io.SeekStart); err != nil {
		return fmt.Errorf("weights: %s: %w", part, err)
	}
	bar.resume(have)

	n, readErr, writeErr := copyBody(f, resp.Body, bar)
	if writeErr != nil {
		return fmt.Errorf("weights: %s: %w", part, writeErr)
	}
	if readErr != nil {
		var te *timeoutError
		if errors.As(readErr, &te) {
			return retryable{fmt.Errorf("%v after %s", te, byteCount(have+n, size))}
		}
		return retryable{fmt.Errorf("transfer broken after %s: %v", byteCount(have+n, size), readErr)}
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return retryable{fmt.Errorf("got %d bytes, Content-Length says %d", n, resp.ContentLength)}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("weights: %s: %w", part, err)
	}
	return nil
}

// byteCount says how far a download of size bytes (-1: unknown) got.
func byteCount(n, size int64) string {
	if size < 0 {
		return fmt.Sprintf("%d bytes", n)
	}
	return fmt.Sprintf("%d of %d bytes", n, size)
}

// parseContentRange reads "bytes START-END/TOTAL" (TOTAL may be "*": -1).
func parseContentRange(s string) (start, total int64, ok bool) {
	rest, found := strings.CutPrefix(s, "bytes ")
	if !found {
		return 0, 0, false
	}
	rng, tot, found := strings.Cut(rest, "/")
	if !found {
		return 0, 0, false
	}
	first, _, found := strings.Cut(rng, "-")
	if !found {
		return 0, 0, false
	}
	start, err := strconv.ParseInt(first, 10, 64)
	if err != nil {
		return 0, 0, false
	}
	total = -1
	if tot != "*" {
		if total, err = strconv.ParseInt(tot, 10, 64); err != nil {
			return 0, 0, false
		}
	}
	return start, total, true
}

// copyBody copies src to dst, telling read failures (worth a retry) from
// write failures (not).
func copyBody(dst io.Writer, src io.Reader, bar *progressBar) (n int64, readErr, writeErr error) {
	buf := make([]byte, 256<<10)
	for {
		k, err := src.Read(buf)
		if k > 0 {
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return n, nil, werr
			}
			n += int64(k)
			bar.add(int64(k))
		}
		if err == io.EOF {
			return n, nil, nil
		}
		if err != nil {
			return n, err, nil
		}
	}
}

// linkBlob points dst at blob with a relative symlink as huggingface_hub
// does, or a hard link where symlinks are unavailable.
func linkBlob(blob, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("weights: %w", err)
	}
	if err := os.Remove(dst); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("weights: %w", err)
	}
	rel, err := filepath.Rel(filepath.Dir(dst), blob)
	if err == nil {
		if err = os.Symlink(rel, dst); err == nil {
			return nil
		}
	}
	if err := os.Link(blob, dst); err != nil {
		return fmt.Errorf("weights: linking %s to %s: %w", dst, blob, err)
	}
	return nil
}
