package main

import (
	"encoding/json"
	"slices"

	"github.com/kakeya-ai/kakeya"
)

// A constraint is a request's structured output: none, any JSON object
// (response_format json_object) or JSON that a schema accepts
// (json_schema, vLLM's guided_json), which kakeya.GenerateOptions'
// JSON and JSONSchema carry.
type constraint struct {
	jsonObject bool
	schema     []byte // compact JSON text
}

// decodeResponseFormat decodes response_format: {"type": "text"},
// {"type": "json_object"} or {"type": "json_schema", "json_schema":
// {"name", "description", "schema", "strict"}}. A schema the grammar does
// not take is a 400 naming the keyword and its place in the schema.
func decodeResponseFormat(raw json.RawMessage) (constraint, *apiError) {
	const field = "response_format"
	var rf map[string]json.RawMessage
	if err := decodeField(raw, field, &rf); err != nil {
		return constraint{}, err
	}
	var typ string
	if t, ok := rf["type"]; !ok || isNull(t) {
		return constraint{}, badRequest(field+".type", "response_format needs a type: text, json_object or json_schema")
	} else if err := decodeField(t, field+".type", &typ); err != nil {
		return constraint{}, err
	}
	for _, k := range sortedKeys(rf) {
		if k != "type" && !(typ == "json_schema" && k == "json_schema") {
			return constraint{}, unsupported(field+"."+k, "")
		}
	}
	switch typ {
	case "text":
		return constraint{}, nil
	case "json_object":
		return constraint{jsonObject: true}, nil
	case "json_schema":
	default:
		return constraint{}, badRequest(field+".type", "response_format type %q is not one of text, json_object, json_schema", typ)
	}
	const js = field + ".json_schema"
	var spec map[string]json.RawMessage
	if raw, ok := rf["json_schema"]; !ok || isNull(raw) {
		return constraint{}, badRequest(js, "response_format json_schema needs json_schema: {name, schema}")
	} else if err := decodeField(raw, js, &spec); err != nil {
		return constraint{}, err
	}
	for _, k := range sortedKeys(spec) {
		var err *apiError
		switch v := spec[k]; k {
		case "name", "description":
			var s string
			err = decodeField(v, js+"."+k, &s)
		case "strict":
			// The grammar is always enforced: strict or not, the
			// output follows the schema.
			var b bool
			err = decodeField(v, js+"."+k, &b)
		case "schema":
		default:
			err = unsupported(js+"."+k, "")
		}
		if err != nil {
			return constraint{}, err
		}
	}
	schema := spec["schema"]
	if schema == nil || isNull(schema) {
		schema = json.RawMessage(`true`) // any JSON value, as the API allows
	}
	return decodeSchema(schema, js+".schema")
}

// decodeGuidedJSON decodes vLLM's guided_json: a schema, or its text.
func decodeGuidedJSON(raw json.RawMessage) (constraint, *apiError) {
	var text string
	if json.Unmarshal(raw, &text) == nil {
		raw = json.RawMessage(text)
	}
	return decodeSchema(raw, "guided_json")
}

// decodeSchema checks a JSON schema: the grammar must compile it.
func decodeSchema(schema json.RawMessage, field string) (constraint, *apiError) {
	if err := kakeya.CheckJSONSchema(schema); err != nil {
		return constraint{}, badRequest(field, "%s: %v", field, err)
	}
	return constraint{schema: schema}, nil
}

func sortedKeys(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// apply sets opt's structured output.
func (c constraint) apply(opt *kakeya.GenerateOptions) {
	opt.JSON, opt.JSONSchema = c.jsonObject, c.schema
}
