package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// A Tool is a function a model may call: its name and the JSON Schema of
// its arguments (nil for any JSON object).
type Tool struct {
	Name       string
	Parameters []byte
}

// CompileArguments compiles a tool's parameters: the JSON Schema of its
// arguments, which must be a JSON object (nil, or a schema that accepts
// any value, means any object). A schema that allows other values is a
// *SchemaError on its type.
func CompileArguments(parameters []byte) (*Grammar, error) {
	c := newCompiler()
	root, err := c.arguments(parameters)
	if err != nil {
		return nil, err
	}
	c.g.root = root
	if err := c.finish(); err != nil {
		return nil, err
	}
	if err := c.g.objectOnly(root); err != nil {
		return nil, err
	}
	return c.g, nil
}

// CompileToolCall compiles one call of one of tools, as the JSON object
// {"name": <a tool's name>, argsKey: <its arguments>} (argsKey is
// "arguments" in the Hermes format, "parameters" in Llama 3.x's): the
// name is read first, then the arguments by that tool's schema (a tagged
// union). Each schema is compiled on its own, so its $ref resolve within
// it; an error names the tool.
func CompileToolCall(argsKey string, tools []Tool) (*Grammar, error) {
	if len(tools) == 0 {
		return nil, errors.New("grammar: a tool call needs at least one tool")
	}
	c := newCompiler()
	g := c.g
	var nameKey, argKey bytes.Buffer
	quote(&nameKey, "name")
	quote(&argKey, argsKey)
	roots := make([]int32, len(tools))
	variants := make([]int32, len(tools))
	for i, t := range tools {
		for _, u := range tools[:i] {
			if u.Name == t.Name {
				return nil, fmt.Errorf("grammar: two tools are named %q", t.Name)
			}
		}
		args, err := c.arguments(t.Parameters)
		if err != nil {
			return nil, fmt.Errorf("tool %q: %w", t.Name, err)
		}
		roots[i] = args
		var name bytes.Buffer
		quote(&name, t.Name)
		variants[i] = g.newNode(node{
			kind:     kObject,
			mapValue: -1,
			props: []prop{
				{name: "name", node: g.newLiteral([]string{name.String()}, nil), required: true},
				{name: argsKey, node: args, required: true},
			},
			reqAt: []int{0, 1, 2},
			keys: []int32{
				g.newTrie([]string{nameKey.String()}, []int32{0}),
				g.newTrie([]string{argKey.String()}, []int32{1}),
				g.newTrie(nil, nil),
			},
		})
	}
	if err := c.finish(); err != nil {
		return nil, err
	}
	for i, r := range roots {
		if err := g.objectOnly(r); err != nil {
			return nil, fmt.Errorf("tool %q: %w", tools[i].Name, err)
		}
	}
	root, ok := c.tagged(variants)
	if !ok {
		return nil, errors.New("grammar: the tools' calls do not make a tagged union") // cannot happen: the names differ
	}
	g.root = root
	return g, nil
}

func newCompiler() *compiler {
	return &compiler{g: &Grammar{anyN: -1}, refs: map[string]int32{}, unions: map[int32]pendingUnion{}}
}

// arguments compiles a tool's parameters into c's grammar, each with its
// own root for $ref; any value becomes any object.
func (c *compiler) arguments(parameters []byte) (int32, error) {
	if len(bytes.TrimSpace(parameters)) == 0 || string(bytes.TrimSpace(parameters)) == "null" {
		return c.g.newNode(node{kind: kObject, mapValue: c.g.anyNode()}), nil
	}
	dec := json.NewDecoder(bytes.NewReader(parameters))
	dec.UseNumber()
	v, err := decodeOrdered(dec)
	if err != nil {
		return 0, fmt.Errorf("json schema: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return 0, errors.New("json schema: text after the schema")
	}
	c.rootSchema, c.refs = v, map[string]int32{}
	n, err := c.compile("#", v)
	if err != nil {
		return 0, err
	}
	if n == c.g.anyN {
		return c.g.newNode(node{kind: kObject, mapValue: n}), nil
	}
	return n, nil
}

// objectOnly reports as a *SchemaError a node whose values may be other
// than objects: a tool's arguments are one.
func (g *Grammar) objectOnly(n int32) error {
	for b := range 256 {
		if byte(b) != '{' && g.begins(n, byte(b)) {
			return &SchemaError{Path: "#", Keyword: "type", Reason: fmt.Sprintf("a tool's arguments must be a JSON object; this schema allows values beginning with %q", byte(b))}
		}
	}
	return nil
}
