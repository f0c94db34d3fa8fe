// Package grammar constrains generation to JSON that a JSON Schema
// accepts. CompileSchema (or JSONObject) turns a schema into a Grammar, a
// pushdown automaton over bytes; a Vocab holds a tokenizer's token bytes
// in a trie, built once per tokenizer; a Matcher follows one generation,
// masking at each step the tokens whose bytes would leave the output no
// longer a prefix of a valid document (Mask) and advancing by the token
// sampled (Advance).
//
// The schema subset is what structured-output APIs send: objects with
// properties, required and additionalProperties, arrays with items,
// minItems and maxItems, enum and const, the types string, number,
// integer, boolean and null (or a list of them), anyOf and oneOf whose
// alternatives begin with different bytes or are objects told apart by
// their first property, required, whose string constants no two share
// (a tagged union: the tag's value chooses the alternative), and $ref to
// "#", "#/$defs/..." or "#/definitions/...". CompileToolCall compiles a
// tool call, one such union over the tools. Annotations (title, description, default,
// examples, format, ...) are ignored; any other keyword is refused with a
// *SchemaError naming it and its JSON pointer.
//
// What the automaton generates is a subset of what the schema accepts:
// properties in the schema's order, no properties beyond those listed
// unless the object lists none, at most MaxWhitespace bytes of whitespace
// between tokens, numbers of bounded length and nesting at most MaxDepth.
package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Limits on what a Matcher lets a model write: a model under a mask can
// otherwise loop on spaces or digits until its token budget is gone.
const (
	MaxWhitespace = 12 // bytes of whitespace in a row
	MaxDepth      = 48 // open objects, arrays and strings
	maxIntDigits  = 18 // digits of a number's integer part
	maxFracDigits = 16 // digits after the point
	maxExpDigits  = 2  // digits of the exponent (float64 holds every value)

	maxKeyBytes = 1 << 20 // bytes in an object's property-name tries
)

// A SchemaError is a schema the compiler does not take: Path is the JSON
// pointer of the subschema, Keyword the keyword at fault.
type SchemaError struct {
	Path    string
	Keyword string
	Reason  string
}

func (e *SchemaError) Error() string {
	if e.Keyword == "" {
		return fmt.Sprintf("json schema at %s: %s", e.Path, e.Reason)
	}
	return fmt.Sprintf("json schema at %s: keyword %q: %s", e.Path, e.Keyword, e.Reason)
}

type kind uint8

const (
	kObject  kind = iota // properties, or a map when mapValue >= 0
	kArray               // items
	kString              // any string
	kNumber              // a JSON number (integer: no fraction or exponent)
	kLiteral             // one of fixed JSON texts: enum, const, true, false, null
	kUnion               // alternatives told apart by their first byte
	kRef                 // a $ref's target being compiled: replaced once it is
)

// A node is one compiled subschema.
type node struct {
	kind kind

	// kObject: the properties in schema order, reqAt[i] the index of the
	// first required one at or after i (len(props) for none), keys[i]
	// the trie of the quoted names a key may take when i properties were
	// passed; mapValue the values' node of an object without properties.
	props    []prop
	reqAt    []int
	keys     []int32
	mapValue int32

	// kArray.
	items              int32
	minItems, maxItems int // maxItems < 0: unbounded

	integer bool  // kNumber
	lit     int32 // kLiteral: the root of its trie

	// kUnion: the alternative for each first byte, -1 for none.
	alts  []int32
	first *[256]int16

	// kObject, a tagged union: its one property is the tag, whose value
	// (a string literal, its trie's term the variant's index) chooses the
	// object node the frame continues as, variants[term].
	variants []int32
}

type prop struct {
	name     string
	node     int32
	required bool
}

// A Grammar is a compiled schema. It is immutable and safe for concurrent
// use by many Matchers.
type Grammar struct {
	nodes []node
	tries []tnode
	root  int32
	anyN  int32 // the node of any JSON value, -1 until needed
}

// tnode is a node of a literal trie: a set of fixed byte strings matched
// byte by byte. term is the value of the string ending here (the
// property's index for keys, 0 for literals), -1 for none.
type tnode struct {
	edges []tedge
	term  int32
}

type tedge struct {
	b    byte
	next int32
}

// JSONObject returns the grammar of any JSON object, the
// response_format json_object of OpenAI's API.
func JSONObject() *Grammar {
	g := &Grammar{anyN: -1}
	g.root = g.newNode(node{kind: kObject, mapValue: g.anyNode()})
	return g
}

// JSONValue returns the grammar of any JSON value.
func JSONValue() *Grammar {
	g := &Grammar{anyN: -1}
	g.root = g.anyNode()
	return g
}

// CompileSchema compiles a JSON Schema given as JSON text.
func CompileSchema(schema []byte) (*Grammar, error) {
	dec := json.NewDecoder(bytes.NewReader(schema))
	dec.UseNumber()
	v, err := decodeOrdered(dec)
	if err != nil {
		return nil, fmt.Errorf("json schema: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("json schema: text after the schema")
	}
	c := &compiler{g: &Grammar{anyN: -1}, rootSchema: v, refs: map[string]int32{}, unions: map[int32]pendingUnion{}}
	root, err := c.compile("#", v)
	if err != nil {
		return nil, err
	}
	if err := c.finish(); err != nil {
		return nil, err
	}
	c.g.root = root
	return c.g, nil
}

// object is a decoded JSON object with its keys in order.
type object struct {
	keys []string
	vals map[string]any
}

func (o *object) get(k string) (any, bool) {
	v, ok := o.vals[k]
	return v, ok
}

// decodeOrdered decodes one JSON value as encoding/json does with
// UseNumber, except that objects are *object, keeping their key order
// (properties are generated in the schema's order).
func decodeOrdered(dec *json.Decoder) (any, error) {
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := t.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := &object{vals: map[string]any{}}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k := kt.(string)
				v, err := decodeOrdered(dec)
				if err != nil {
					return nil, err
				}
				if _, dup := o.vals[k]; dup {
					return nil, fmt.Errorf("duplicate key %q", k)
				}
				o.keys = append(o.keys, k)
				o.vals[k] = v
			}
			_, err := dec.Token()
			return o, err
		case '[':
			a := []any{}
			for dec.More() {
				v, err := decodeOrdered(dec)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			_, err := dec.Token()
			return a, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	default:
		return t, nil
	}
}

// canonical writes v as compact JSON, keys in their order, no HTML
// escaping: the one spelling a literal may take.
func canonical(buf *bytes.Buffer, v any) {
	switch v := v.(type) {
	case *object:
		buf.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			quote(buf, k)
			buf.WriteByte(':')
			canonical(buf, v.vals[k])
		}
		buf.WriteByte('}')
	case []any:
		buf.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				buf.WriteByte(',')
			}
			canonical(buf, e)
		}
		buf.WriteByte(']')
	case string:
		quote(buf, v)
	case json.Number:
		buf.WriteString(string(v))
	case bool:
		buf.WriteString(strconv.FormatBool(v))
	case nil:
		buf.WriteString("null")
	}
}

// quote writes s as a JSON string without HTML escaping.
func quote(buf *bytes.Buffer, s string) {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	enc.Encode(s) // a string always encodes
	buf.Truncate(buf.Len() - 1)
}

type compiler struct {
	g          *Grammar
	rootSchema any
	refs       map[string]int32
	unions     map[int32]pendingUnion // the unions, until finish
}

// annotations are keywords that do not constrain the value (format is an
// annotation by default in draft 2020-12), ignored.
var annotations = map[string]bool{
	"title": true, "description": true, "default": true, "examples": true,
	"$schema": true, "$id": true, "$comment": true, "format": true,
	"deprecated": true, "readOnly": true, "writeOnly": true,
	"$defs": true, "definitions": true, "strict": true,
	"contentMediaType": true, "contentEncoding": true,
}

// keywords are the constraining keywords the compiler implements.
var keywords = map[string]bool{
	"type": true, "properties": true, "required": true,
	"additionalProperties": true, "items": true, "minItems": true,
	"maxItems": true, "enum": true, "const": true, "anyOf": true,
	"oneOf": true, "$ref": true,
}

func (c *compiler) errorf(path, kw, format string, args ...any) error {
	return &SchemaError{Path: path, Keyword: kw, Reason: fmt.Sprintf(format, args...)}
}

func (g *Grammar) newNode(n node) int32 {
	g.nodes = append(g.nodes, n)
	return int32(len(g.nodes) - 1)
}

func (c *compiler) compile(path string, v any) (int32, error) {
	switch v := v.(type) {
	case bool:
		if !v {
			return 0, c.errorf(path, "", "the schema false accepts no value")
		}
		return c.g.anyNode(), nil
	case *object:
		return c.compileObject(path, v)
	}
	return 0, c.errorf(path, "", "a schema must be an object or a boolean, not %s", jsonType(v))
}

func (c *compiler) compileObject(path string, s *object) (int32, error) {
	for _, k := range s.keys {
		if !keywords[k] && !annotations[k] {
			return 0, c.errorf(path, k, "not supported")
		}
	}
	if ref, ok := s.get("$ref"); ok {
		for _, k := range s.keys {
			if keywords[k] && k != "$ref" {
				return 0, c.errorf(path, k, "not supported beside $ref")
			}
		}
		return c.ref(path, ref)
	}
	for _, kw := range []string{"anyOf", "oneOf"} {
		if alts, ok := s.get(kw); ok {
			for _, k := range s.keys {
				if keywords[k] && k != kw {
					return 0, c.errorf(path, k, "not supported beside %s", kw)
				}
			}
			return c.union(path+"/"+kw, kw, alts)
		}
	}
	var types []string
	if t, ok := s.get("type"); ok {
		switch t := t.(type) {
		case string:
			types = []string{t}
		case []any:
			for i, e := range t {
				name, ok := e.(string)
				if !ok {
					return 0, c.errorf(fmt.Sprintf("%s/type/%d", path, i), "type", "a type must be a string, not %s", jsonType(e))
				}
				types = append(types, name)
			}
			if len(types) == 0 {
				return 0, c.errorf(path, "type", "an empty list of types accepts no value")
			}
		default:
			return 0, c.errorf(path, "type", "must be a string or a list of strings, not %s", jsonType(t))
		}
		for _, name := range types {
			switch name {
			case "object", "array", "string", "number", "integer", "boolean", "null":
			default:
				return 0, c.errorf(path, "type", "unknown type %q", name)
			}
		}
	}
	if en, ok := s.get("enum"); ok {
		list, ok := en.([]any)
		if !ok || len(list) == 0 {
			return 0, c.errorf(path, "enum", "must be a non-empty list")
		}
		return c.literals(path, "enum", list, types)
	}
	if cv, ok := s.get("const"); ok {
		return c.literals(path, "const", []any{cv}, types)
	}
	if types == nil {
		switch {
		case has(s, "properties", "required", "additionalProperties"):
			types = []string{"object"}
		case has(s, "items", "minItems", "maxItems"):
			types = []string{"array"}
		default:
			return c.g.anyNode(), nil
		}
	}
	var alts []int32
	for _, name := range types {
		n, err := c.typed(path, s, name)
		if err != nil {
			return 0, err
		}
		alts = append(alts, n)
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return c.newUnion(alts, path, "type", fmt.Sprintf("types %v overlap", types)), nil
}

func has(s *object, keys ...string) bool {
	for _, k := range keys {
		if _, ok := s.vals[k]; ok {
			return true
		}
	}
	return false
}

// typed compiles s as a value of the one type name.
func (c *compiler) typed(path string, s *object, name string) (int32, error) {
	g := c.g
	switch name {
	case "string":
		return g.newNode(node{kind: kString}), nil
	case "number", "integer":
		return g.newNode(node{kind: kNumber, integer: name == "integer"}), nil
	case "boolean":
		return g.newLiteral([]string{"true", "false"}, nil), nil
	case "null":
		return g.newLiteral([]string{"null"}, nil), nil
	case "array":
		return c.array(path, s)
	}
	return c.object(path, s)
}

func (c *compiler) array(path string, s *object) (int32, error) {
	n := node{kind: kArray, maxItems: -1}
	if it, ok := s.get("items"); ok {
		if _, tuple := it.([]any); tuple {
			return 0, c.errorf(path, "items", "a list of schemas (a tuple) is not supported")
		}
		items, err := c.compile(path+"/items", it)
		if err != nil {
			return 0, err
		}
		n.items = items
	} else {
		n.items = c.g.anyNode()
	}
	for _, kw := range []string{"minItems", "maxItems"} {
		v, ok := s.get(kw)
		if !ok {
			continue
		}
		num, isNum := v.(json.Number)
		k, err := strconv.ParseInt(string(num), 10, 32)
		if !isNum || err != nil || k < 0 {
			return 0, c.errorf(path, kw, "must be a non-negative integer, not %v", v)
		}
		if kw == "minItems" {
			n.minItems = int(k)
		} else {
			n.maxItems = int(k)
		}
	}
	if n.maxItems >= 0 && n.minItems > n.maxItems {
		return 0, c.errorf(path, "minItems", "%d exceeds maxItems %d", n.minItems, n.maxItems)
	}
	if n.minItems > 0xfff0 || n.maxItems > 0xfff0 {
		return 0, c.errorf(path, "maxItems", "at most %d is supported", 0xfff0)
	}
	return c.g.newNode(n), nil
}

func (c *compiler) object(path string, s *object) (int32, error) {
	n := node{kind: kObject, mapValue: -1}
	var props *object
	if p, ok := s.get("properties"); ok {
		if props, ok = p.(*object); !ok {
			return 0, c.errorf(path, "properties", "must be an object, not %s", jsonType(p))
		}
	}
	required := map[string]bool{}
	if r, ok := s.get("required"); ok {
		list, ok := r.([]any)
		if !ok {
			return 0, c.errorf(path, "required", "must be a list of strings, not %s", jsonType(r))
		}
		for _, e := range list {
			name, ok := e.(string)
			if !ok {
				return 0, c.errorf(path, "required", "must be a list of strings, holds %s", jsonType(e))
			}
			if props == nil || !has(props, name) {
				return 0, c.errorf(path, "required", "%q is not among the properties (and no others are generated)", name)
			}
			required[name] = true
		}
	}
	add, hasAdd := s.get("additionalProperties")
	if props != nil && len(props.keys) > 0 {
		if hasAdd && add != false {
			return 0, c.errorf(path, "additionalProperties", "only false is supported beside properties")
		}
	} else {
		// A map: any keys, values of the additionalProperties schema.
		if !hasAdd {
			add = true
		}
		if add == false {
			n.keys = []int32{c.g.newTrie(nil, nil)}
			n.reqAt = []int{0}
			return c.g.newNode(n), nil
		}
		n.mapValue = -2 // compiled below, after the node exists (recursion)
	}
	self := c.g.newNode(n)
	if n.mapValue == -2 {
		v, err := c.compile(path+"/additionalProperties", add)
		if err != nil {
			return 0, err
		}
		c.g.nodes[self].mapValue = v
		return self, nil
	}
	var ps []prop
	for _, name := range props.keys {
		pn, err := c.compile(path+"/properties/"+escapePointer(name), props.vals[name])
		if err != nil {
			return 0, err
		}
		ps = append(ps, prop{name: name, node: pn, required: required[name]})
	}
	reqAt := make([]int, len(ps)+1)
	reqAt[len(ps)] = len(ps)
	for i := len(ps) - 1; i >= 0; i-- {
		reqAt[i] = reqAt[i+1]
		if ps[i].required {
			reqAt[i] = i
		}
	}
	// keys[i]: the names of properties i..reqAt[i] (the next required
	// one, which may not be skipped), quoted, each ending in its index.
	// Optional properties in a row make these quadratic: bound them.
	var buf bytes.Buffer
	cum := make([]int, len(ps)+1)
	for j, p := range ps {
		buf.Reset()
		quote(&buf, p.name)
		cum[j+1] = cum[j] + buf.Len()
	}
	total := 0
	for i := range ps {
		total += cum[min(reqAt[i]+1, len(ps))] - cum[i]
	}
	if total > maxKeyBytes {
		return 0, c.errorf(path, "properties", "%d properties, too many of them optional in a row (the name sets to match would hold %d bytes, at most %d): mark some required", len(ps), total, maxKeyBytes)
	}
	keys := make([]int32, len(ps)+1)
	for i := range keys {
		var words []string
		var vals []int32
		for j := i; j < len(ps) && j <= reqAt[i]; j++ {
			buf.Reset()
			quote(&buf, ps[j].name)
			words = append(words, buf.String())
			vals = append(vals, int32(j))
		}
		keys[i] = c.g.newTrie(words, vals)
	}
	nd := &c.g.nodes[self]
	nd.props, nd.reqAt, nd.keys = ps, reqAt, keys
	return self, nil
}

// literals compiles enum or const: the values' canonical texts, those of
// the given types only when types are listed.
func (c *compiler) literals(path, kw string, vals []any, types []string) (int32, error) {
	var words []string
	var buf bytes.Buffer
	for _, v := range vals {
		if types != nil && !typeMatches(v, types) {
			continue
		}
		buf.Reset()
		canonical(&buf, v)
		words = append(words, buf.String())
	}
	if len(words) == 0 {
		return 0, c.errorf(path, kw, "no value is of type %v", types)
	}
	return c.g.newLiteral(words, nil), nil
}

func typeMatches(v any, types []string) bool {
	t := jsonType(v)
	for _, name := range types {
		if name == t || (name == "number" && t == "integer") {
			return true
		}
	}
	return false
}

// jsonType names the JSON type of a decoded value (integer for a whole
// number).
func jsonType(v any) string {
	switch v := v.(type) {
	case *object:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case json.Number:
		if _, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			return "integer"
		}
		return "number"
	case bool:
		return "boolean"
	}
	return "null"
}

func (c *compiler) union(path, kw string, v any) (int32, error) {
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		return 0, c.errorf(path, kw, "must be a non-empty list of schemas")
	}
	var alts []int32
	for i, s := range list {
		n, err := c.compile(fmt.Sprintf("%s/%d", path, i), s)
		if err != nil {
			return 0, err
		}
		alts = append(alts, n)
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	// Objects among the alternatives may make a tagged union, which the
	// others are told apart from by their first byte.
	var objs, rest []int32
	for _, a := range alts {
		if c.g.nodes[a].kind == kObject {
			objs = append(objs, a)
		} else {
			rest = append(rest, a)
		}
	}
	if len(objs) > 1 {
		if n, ok := c.tagged(objs); ok {
			if len(rest) == 0 {
				return n, nil
			}
			alts = append(rest, n)
		}
	}
	return c.newUnion(alts, path, kw, "two alternatives overlap"), nil
}

// tagged makes a tagged union of alternatives that are all objects whose
// first property is the same required one with string constants (const
// or enum) that no two alternatives share: the discriminated union of
// OpenAPI and pydantic, and a tool call's {"name", "arguments"}. They all
// begin with '{', so that no first byte tells them apart, but the tag's
// value does: the object reads the tag and continues as the alternative
// it names. ok is false for alternatives of any other shape.
func (c *compiler) tagged(alts []int32) (int32, bool) {
	g := c.g
	var tag string
	var words []string
	var vals []int32
	for i, a := range alts {
		nd := &g.nodes[a]
		if nd.kind != kObject || nd.mapValue >= 0 || nd.variants != nil || len(nd.props) == 0 || !nd.props[0].required {
			return 0, false
		}
		p := nd.props[0]
		if i == 0 {
			tag = p.name
		} else if p.name != tag {
			return 0, false
		}
		if g.nodes[p.node].kind != kLiteral {
			return 0, false
		}
		for _, w := range g.trieWords(g.nodes[p.node].lit) {
			if w[0] != '"' {
				return 0, false
			}
			for _, seen := range words {
				if seen == w {
					return 0, false
				}
			}
			words, vals = append(words, w), append(vals, int32(i))
		}
	}
	var buf bytes.Buffer
	quote(&buf, tag)
	return g.newNode(node{
		kind:     kObject,
		mapValue: -1,
		props:    []prop{{name: tag, node: g.newLiteral(words, vals), required: true}},
		reqAt:    []int{0, 1},
		keys:     []int32{g.newTrie([]string{buf.String()}, []int32{0}), g.newTrie(nil, nil)},
		variants: alts,
	}), true
}

// trieWords returns the words of the literal trie at root.
func (g *Grammar) trieWords(root int32) []string {
	var words []string
	var walk func(n int32, prefix []byte)
	walk = func(n int32, prefix []byte) {
		t := &g.tries[n]
		if t.term >= 0 {
			words = append(words, string(prefix))
		}
		for _, e := range t.edges {
			walk(e.next, append(prefix, e.b))
		}
	}
	walk(root, nil)
	return words
}

// ref resolves a $ref to the root or to $defs/definitions, compiling each
// target once (so that recursive schemas close a loop).
func (c *compiler) ref(path string, v any) (int32, error) {
	ref, ok := v.(string)
	if !ok {
		return 0, c.errorf(path, "$ref", "must be a string")
	}
	if n, ok := c.refs[ref]; ok {
		return n, nil
	}
	if ref != "#" && !strings.HasPrefix(ref, "#/$defs/") && !strings.HasPrefix(ref, "#/definitions/") {
		return 0, c.errorf(path, "$ref", "%q: only \"#\", \"#/$defs/...\" and \"#/definitions/...\" are supported", ref)
	}
	target := c.rootSchema
	if ref != "#" {
		for _, tok := range strings.Split(ref[2:], "/") {
			o, ok := target.(*object)
			if !ok {
				return 0, c.errorf(path, "$ref", "%q does not resolve", ref)
			}
			tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
			if target, ok = o.get(tok); !ok {
				return 0, c.errorf(path, "$ref", "%q does not resolve", ref)
			}
		}
	}
	// A placeholder node, patched once the target is compiled, so that a
	// reference to it from inside the target finds it.
	ph := c.g.newNode(node{kind: kRef})
	c.refs[ref] = ph
	n, err := c.compile(ref, target)
	if err != nil {
		return 0, err
	}
	if n == ph {
		return 0, c.errorf(path, "$ref", "%q refers to itself without a value in between", ref)
	}
	c.g.nodes[ph] = c.g.nodes[n]
	if u, ok := c.unions[n]; ok {
		c.unions[ph] = u
	}
	return ph, nil
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// newTrie builds a literal trie over words, word i ending in vals[i] (0
// when vals is nil).
func (g *Grammar) newTrie(words []string, vals []int32) int32 {
	root := int32(len(g.tries))
	g.tries = append(g.tries, tnode{term: -1})
	for i, w := range words {
		at := root
		for j := 0; j < len(w); j++ {
			next := int32(-1)
			for _, e := range g.tries[at].edges {
				if e.b == w[j] {
					next = e.next
				}
			}
			if next < 0 {
				next = int32(len(g.tries))
				g.tries = append(g.tries, tnode{term: -1})
				g.tries[at].edges = append(g.tries[at].edges, tedge{w[j], next})
			}
			at = next
		}
		if vals != nil {
			g.tries[at].term = vals[i]
		} else {
			g.tries[at].term = 0
		}
	}
	return root
}

func (g *Grammar) newLiteral(words []string, vals []int32) int32 {
	return g.newNode(node{kind: kLiteral, lit: g.newTrie(words, vals)})
}

// A pendingUnion is a union whose table of first bytes is made once the
// whole schema is compiled: an alternative may be a $ref to a schema
// still being compiled when the union is met (a recursive schema).
type pendingUnion struct {
	path, kw, what string
}

// newUnion makes a node of alternatives to be told apart by their first
// byte (see finish).
func (c *compiler) newUnion(alts []int32, path, kw, what string) int32 {
	n := c.g.newNode(node{kind: kUnion, alts: alts})
	c.unions[n] = pendingUnion{path, kw, what}
	return n
}

// finish makes the unions' tables of first bytes, refusing alternatives
// that may begin with the same byte and unions that contain themselves
// as an alternative (no byte would tell them apart).
func (c *compiler) finish() error {
	state := map[int32]int{} // 1: being made, 2: made
	var build func(n int32) error
	build = func(n int32) error {
		switch state[n] {
		case 1:
			u := c.unions[n]
			return c.errorf(u.path, u.kw, "an alternative is the union itself (through $ref): it would have no first byte to tell it by")
		case 2:
			return nil
		}
		state[n] = 1
		nd := &c.g.nodes[n]
		first := new([256]int16)
		for i := range first {
			first[i] = -1
		}
		for i, a := range nd.alts {
			if c.g.nodes[a].kind == kUnion && c.g.nodes[a].first == nil {
				if err := build(a); err != nil {
					return err
				}
			}
			for b := range 256 {
				if !c.g.begins(a, byte(b)) {
					continue
				}
				if first[b] >= 0 {
					u := c.unions[n]
					return c.errorf(u.path, u.kw, "%s: two alternatives may begin with %q (only alternatives of different types, or disjoint enums, are supported)", u.what, byte(b))
				}
				first[b] = int16(i)
			}
		}
		c.g.nodes[n].first = first
		state[n] = 2
		return nil
	}
	for n := range c.g.nodes {
		if c.g.nodes[n].kind == kUnion && c.g.nodes[n].first == nil {
			if err := build(int32(n)); err != nil {
				return err
			}
		}
	}
	return nil
}

// begins reports whether a value of node n may begin with byte b.
func (g *Grammar) begins(n int32, b byte) bool {
	nd := &g.nodes[n]
	switch nd.kind {
	case kObject:
		return b == '{'
	case kArray:
		return b == '['
	case kString:
		return b == '"'
	case kNumber:
		return b == '-' || '0' <= b && b <= '9'
	case kLiteral:
		for _, e := range g.tries[nd.lit].edges {
			if e.b == b {
				return true
			}
		}
		return false
	}
	return nd.first[b] >= 0
}

// anyNode returns the node of any JSON value, made once.
func (g *Grammar) anyNode() int32 {
	if g.anyN >= 0 {
		return g.anyN
	}
	// The union first, so that the map and the array can refer to it.
	u := g.newNode(node{kind: kUnion})
	g.anyN = u
	obj := g.newNode(node{kind: kObject, mapValue: u})
	arr := g.newNode(node{kind: kArray, items: u, maxItems: -1})
	str := g.newNode(node{kind: kString})
	num := g.newNode(node{kind: kNumber})
	lit := g.newLiteral([]string{"true", "false", "null"}, nil)
	alts := []int32{obj, arr, str, num, lit}
	first := new([256]int16)
	for i := range first {
		first[i] = -1
	}
	for i, a := range alts {
		for b := range 256 {
			if g.begins(a, byte(b)) {
				first[b] = int16(i)
			}
		}
	}
	g.nodes[u].alts, g.nodes[u].first = alts, first
	return u
}
