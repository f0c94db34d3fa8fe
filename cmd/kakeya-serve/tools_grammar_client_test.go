//go:build openai

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// grammarTools are the tools of the tool-grammar tests: a schema with an
// enum and bounds, one with $ref into its own $defs, one without
// parameters.
var grammarTools = []struct {
	name, params string
}{
	{"get_weather", `{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["celsius","fahrenheit"]},"days":{"type":"integer"}},"required":["city","unit"],"additionalProperties":false}`},
	{"add", `{"type":"object","properties":{"a":{"$ref":"#/$defs/n"},"b":{"$ref":"#/$defs/n"}},"required":["a","b"],"additionalProperties":false,"$defs":{"n":{"type":"number"}}}`},
	{"ping", ``},
}

func grammarToolParams(t *testing.T) ([]openai.ChatCompletionToolUnionParam, map[string]*jsonschema.Schema) {
	t.Helper()
	var tools []openai.ChatCompletionToolUnionParam
	valid := map[string]*jsonschema.Schema{}
	for _, tool := range grammarTools {
		def := openai.FunctionDefinitionParam{Name: tool.name}
		schema := `{"type":"object"}`
		if tool.params != "" {
			schema = tool.params
			if err := json.Unmarshal([]byte(tool.params), &def.Parameters); err != nil {
				t.Fatal(err)
			}
		}
		tools = append(tools, openai.ChatCompletionFunctionTool(def))
		doc, _ := jsonschema.UnmarshalJSON(strings.NewReader(schema))
		c := jsonschema.NewCompiler()
		if err := c.AddResource(tool.name+".json", doc); err != nil {
			t.Fatal(err)
		}
		v, err := c.Compile(tool.name + ".json")
		if err != nil {
			t.Fatal(err)
		}
		valid[tool.name] = v
	}
	return tools, valid
}

// Under tool_choice required or named the reference model, sampled at
// several seeds, writes calls whose name is one of the tools' (the named
// one) and whose arguments validate against that tool's schema
// (santhosh-tekuri/jsonschema, independent of the grammar), through the
// official client, whole and streamed; a schema the grammar refuses is a
// 400 naming the tool's place and the keyword.
func TestOpenAIClientToolGrammar(t *testing.T) {
	s := startServer(t)
	c := s.client()
	ctx := context.Background()
	tools, valid := grammarToolParams(t)
	params := func(choice openai.ChatCompletionToolChoiceOptionUnionParam, seed int64) openai.ChatCompletionNewParams {
		return openai.ChatCompletionNewParams{
			Model:       "ref",
			Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What's the weather in Paris, and what is 2 + 3?")},
			Tools:       tools,
			ToolChoice:  choice,
			Seed:        openai.Int(seed),
			Temperature: openai.Float(1),
			MaxTokens:   openai.Int(160),
		}
	}
	required := openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}
	named := openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "add"})
	check := func(what string, name, args string, want string) {
		t.Helper()
		v := valid[name]
		if v == nil || want != "" && name != want {
			t.Fatalf("%s: a call of %q, want one of the tools (%q)", what, name, want)
		}
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(args))
		if err != nil {
			t.Fatalf("%s: arguments %q do not parse: %v", what, args, err)
		}
		if err := v.Validate(inst); err != nil {
			t.Fatalf("%s: arguments %s of %s do not validate: %v", what, args, name, err)
		}
	}
	finished, names := 0, map[string]bool{}
	for seed := range int64(5) {
		for _, choice := range []openai.ChatCompletionToolChoiceOptionUnionParam{required, named} {
			got, err := c.Chat.Completions.New(ctx, params(choice, seed))
			if err != nil {
				t.Fatal(err)
			}
			ch := got.Choices[0]
			if ch.FinishReason == "length" {
				continue
			}
			want := ""
			if choice.OfFunctionToolChoice != nil {
				want = "add"
			}
			if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 || ch.Message.Content != "" {
				t.Fatalf("seed %d (%q): %+v, want one call", seed, want, ch)
			}
			fn := ch.Message.ToolCalls[0].Function
			check(fmt.Sprintf("seed %d", seed), fn.Name, fn.Arguments, want)
			finished++
			names[fn.Name] = true
		}
	}
	t.Logf("%d of 10 calls finished, of the tools %v", finished, names)
	if finished < 5 || len(names) < 2 {
		t.Errorf("%d of 10 calls finished, of the tools %v", finished, names)
	}

	// Streamed, through the client's accumulator.
	streamed := 0
	for seed := range int64(3) {
		stream := c.Chat.Completions.NewStreaming(ctx, params(required, seed))
		var acc openai.ChatCompletionAccumulator
		var calls []openai.FinishedChatCompletionToolCall
		for stream.Next() {
			acc.AddChunk(stream.Current())
			if tc, ok := acc.JustFinishedToolCall(); ok {
				calls = append(calls, tc)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if acc.Choices[0].FinishReason == "length" {
			continue
		}
		if len(calls) != 1 || acc.Choices[0].FinishReason != "tool_calls" {
			t.Fatalf("streamed seed %d: calls %+v, finish %q", seed, calls, acc.Choices[0].FinishReason)
		}
		check("streamed", calls[0].Name, calls[0].Arguments, "")
		streamed++
	}
	if streamed == 0 {
		t.Error("no streamed call finished")
	}

	// Schemas the grammar refuses, and a reply constrained twice.
	bad := params(required, 0)
	var def openai.FunctionDefinitionParam
	def.Name = "search"
	json.Unmarshal([]byte(`{"type":"object","properties":{"q":{"type":"string","pattern":"^[a-z]+$"}}}`), &def.Parameters)
	bad.Tools = append(append([]openai.ChatCompletionToolUnionParam{}, tools...), openai.ChatCompletionFunctionTool(def))
	_, err := c.Chat.Completions.New(ctx, bad)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Param != "tools[3].function.parameters" ||
		!strings.Contains(apiErr.Message, `"search"`) || !strings.Contains(apiErr.Message, `"pattern"`) {
		t.Errorf("a pattern under tool_choice required: %v", err)
	}
	bad.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("auto")}
	if _, err := c.Chat.Completions.New(ctx, bad); err != nil {
		t.Errorf("auto leaves the arguments free, any schema taken: %v", err)
	}
	bad = params(named, 0)
	bad.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}}
	if _, err := c.Chat.Completions.New(ctx, bad); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Param != "response_format" {
		t.Errorf("response_format beside a named tool_choice: %v", err)
	}
}
