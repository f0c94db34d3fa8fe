//go:build openai

package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/kakeya-ai/kakeya"
)

const weatherSchema = `{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["celsius","fahrenheit"]},"temp":{"type":"number"},"days":{"type":"array","items":{"$ref":"#/$defs/day"},"maxItems":2}},"required":["city","unit","temp"],"additionalProperties":false,"$defs":{"day":{"type":"object","properties":{"rain":{"type":"boolean"}},"required":["rain"],"additionalProperties":false}}}`

// The official client's response_format: json_schema gives, plain and
// streamed, the reference engine's greedy text under the same schema, a
// document that validates against it; json_object gives an object; a
// schema the grammar refuses is a 400 naming the keyword.
func TestOpenAIClientStructured(t *testing.T) {
	ref := reference(t)
	s := startServer(t)
	c := s.client()
	ctx := context.Background()
	const question = "What is the weather in Paris? Answer in JSON."
	want := generate(t, ref, "", kakeya.GenerateOptions{Chat: true, MaxTokens: 120, JSONSchema: []byte(weatherSchema),
		Messages: toMessages("user", question)})
	// The schema as its text: properties are generated in the schema's
	// order, which a map[string]any would sort.
	schema := json.RawMessage(weatherSchema)
	doc, _ := jsonschema.UnmarshalJSON(strings.NewReader(weatherSchema))
	comp := jsonschema.NewCompiler()
	if err := comp.AddResource("weather.json", doc); err != nil {
		t.Fatal(err)
	}
	val, err := comp.Compile("weather.json")
	if err != nil {
		t.Fatal(err)
	}
	params := openai.ChatCompletionNewParams{
		Model:       "ref",
		Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage(question)},
		MaxTokens:   openai.Int(120),
		Temperature: openai.Float(0),
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
			JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "weather", Schema: schema, Strict: openai.Bool(true)},
		}},
	}
	got, err := c.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	text := got.Choices[0].Message.Content
	if text != want.Text || got.Choices[0].FinishReason != finishReason(want.StopReason) {
		t.Fatalf("got %q (%s), want the engine's %q (%s)", text, got.Choices[0].FinishReason, want.Text, want.StopReason)
	}
	if want.StopReason == kakeya.StopEOS {
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
		if err != nil {
			t.Fatalf("%q does not parse: %v", text, err)
		}
		if err := val.Validate(inst); err != nil {
			t.Fatalf("%s does not validate: %v", text, err)
		}
	}

	stream := c.Chat.Completions.NewStreaming(ctx, params)
	var streamed strings.Builder
	for stream.Next() {
		if ch := stream.Current(); len(ch.Choices) > 0 {
			streamed.WriteString(ch.Choices[0].Delta.Content)
		}
	}
	if err := stream.Err(); err != nil || streamed.String() != want.Text {
		t.Fatalf("streamed %q (%v), want %q", streamed.String(), err, want.Text)
	}

	for seed := range 3 {
		obj, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:          "ref",
			Messages:       []openai.ChatCompletionMessageParamUnion{openai.UserMessage(question)},
			MaxTokens:      openai.Int(200),
			Seed:           openai.Int(int64(seed)),
			ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}},
		})
		if err != nil {
			t.Fatal(err)
		}
		out := obj.Choices[0].Message.Content
		if obj.Choices[0].FinishReason == "length" {
			if !strings.HasPrefix(out, "{") {
				t.Fatalf("json_object output %q", out)
			}
			continue
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("json_object output %q: %v", out, err)
		}
	}

	bad := params
	bad.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
		JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "x", Schema: map[string]any{"type": "string", "minLength": 3}},
	}}
	_, err = c.Chat.Completions.New(ctx, bad)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Param != "response_format.json_schema.schema" || !strings.Contains(apiErr.Message, `"minLength"`) {
		t.Fatalf("error %v, want a 400 naming minLength", err)
	}
}
