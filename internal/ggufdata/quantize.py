# Rewrites a GGUF with its 2-D weight matrices quantized by gguf-py's own
# quantizer (llama.cpp's Python transcription of ggml's quantize_row_*_ref),
# for the tests: python3 quantize.py SRC DST TYPE, TYPE Q8_0 or Q4_0.
# Metadata is copied as gguf-py's gguf_new_metadata.py copies it.
import sys
import numpy as np
import gguf
from gguf import quants

src, dst, qname = sys.argv[1], sys.argv[2], sys.argv[3]
qtype = gguf.GGMLQuantizationType[qname]
r = gguf.GGUFReader(src)
arch = r.fields[gguf.Keys.General.ARCHITECTURE].contents()
w = gguf.GGUFWriter(dst, arch)
for f in r.fields.values():
    if f.name == gguf.Keys.General.ARCHITECTURE or f.name.startswith("GGUF."):
        continue
    t = f.types[0]
    sub = f.types[-1] if t == gguf.GGUFValueType.ARRAY else None
    w.add_key_value(f.name, f.contents(), t, sub_type=sub)
for t in r.tensors:
    data = quants.dequantize(t.data, t.tensor_type).astype(np.float32)
    shape = [int(d) for d in reversed(t.shape)]  # slowest first
    data = data.reshape(shape)
    if data.ndim == 2 and t.name.endswith(".weight"):
        w.add_tensor(t.name, quants.quantize(data, qtype), raw_dtype=qtype)
    else:
        w.add_tensor(t.name, data)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
