//go:build openai

package main

import (
	"context"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// The official client's weather round trip: tools sent, the model's call
// (scripted: the test model cannot write one) comes back as tool_calls,
// whole and streamed through the client's accumulator; the call and the
// tool's result go back as the history, which the prompt renders, and
// the final answer is content.
func TestOpenAIClientTools(t *testing.T) {
	answer := "It is 21 degrees in Paris."
	ss := newScriptedServer(t, weatherCall, weatherCall, answer)
	c := openai.NewClient(option.WithBaseURL(ss.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{
		Model:    "ref",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What's the weather in Paris?")},
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
			Name:        "get_weather",
			Description: openai.String("Get the current weather in a city"),
			Parameters: openai.FunctionParameters{
				"type":       "object",
				"properties": map[string]any{"city": map[string]string{"type": "string"}},
				"required":   []string{"city"},
			},
		})},
		Seed:      openai.Int(7),
		MaxTokens: openai.Int(32),
	}
	got, err := c.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	ch := got.Choices[0]
	if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 || ch.Message.Content != "" {
		t.Fatalf("choice %+v, want one tool call", ch)
	}
	call := ch.Message.ToolCalls[0]
	if call.Function.Name != "get_weather" || call.Function.Arguments != `{"city":"Paris"}` || !strings.HasPrefix(call.ID, "call_") || call.Type != "function" {
		t.Fatalf("tool call %+v", call)
	}

	// Streamed, the accumulator puts the same call together.
	stream := c.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	var finished []openai.FinishedChatCompletionToolCall
	for stream.Next() {
		acc.AddChunk(stream.Current())
		if tc, ok := acc.JustFinishedToolCall(); ok {
			finished = append(finished, tc)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(finished) != 1 || finished[0].Name != "get_weather" || finished[0].Arguments != `{"city":"Paris"}` || finished[0].Index != 0 {
		t.Errorf("streamed tool calls %+v", finished)
	}
	if m := acc.Choices[0].Message; len(m.ToolCalls) != 1 || m.ToolCalls[0].ID == "" || acc.Choices[0].FinishReason != "tool_calls" {
		t.Errorf("accumulated %+v, finish %q", m, acc.Choices[0].FinishReason)
	}

	// The round trip: the call and its result go back.
	params.Messages = append(params.Messages, ch.Message.ToParam(), openai.ToolMessage(`{"temperature": 21}`, call.ID))
	got, err = c.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if ch := got.Choices[0]; ch.Message.Content != answer || ch.FinishReason != "stop" || len(ch.Message.ToolCalls) != 0 {
		t.Errorf("final answer %+v", ch)
	}
	want := "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n" +
		"<|im_start|>user\n<tool_response>\n{\"temperature\": 21}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
	if p := ss.prompt(t, 2); !strings.HasSuffix(p, want) || !strings.Contains(p, "<tools>\n{\"function\": {\"name\": \"get_weather\"") {
		t.Errorf("the round trip's prompt\n%q\nwant it to end\n%q", p, want)
	}
}
