"""A stand-in for transformers where it is not installed (Debian has no
package of it): llama.cpp's convert_hf_to_gguf.py imports AutoConfig at
the top, and where AutoConfig fails it reads config.json itself, its own
fallback. The SentencePiece vocabulary path the Gemma converters take
needs nothing else from transformers.
"""


class AutoConfig:
    @staticmethod
    def from_pretrained(*args, **kwargs):
        raise OSError("transformers is not installed: read config.json")


class AutoTokenizer:
    @staticmethod
    def from_pretrained(*args, **kwargs):
        raise OSError("transformers is not installed")
