package weights

// The most bytes the JSON files of a model directory are read to: far past
// what the formats need (config.json and generation_config.json are a few
// KiB, a shard index a few MiB for the largest checkpoints), so that a
// wrong path (/dev/zero, a named pipe, a checkpoint misnamed) is an error
// rather than memory grown without bound.
const (
	MaxConfigBytes = 16 << 20 // config.json, generation_config.json
	MaxIndexBytes  = 64 << 20 // model.safetensors.index.json
	maxRefBytes    = 4 << 10  // a hub cache's refs/REV: one commit hash
)
