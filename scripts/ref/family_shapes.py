"""The synthetic models' shapes, prompt and step count that the family
references (make_family_ref.py) and the LoRA references (make_lora_ref.py)
share: tests/models/families_fixture.h reads the flags back from each file."""

SHAPE = ["--layers", "3", "--dim", "256", "--heads", "8", "--kv-heads", "2", "--ffn", "512",
         "--vocab", "512", "--ctx", "256", "--seed", "7"]
ARCH_FLAGS = {
    "llama": ["--llama3-rope", "--untied"],
    "qwen2": [],
    "qwen3": ["--head-dim", "64"],
    "phi3": ["--untied"],
    "gemma3": ["--head-dim", "64", "--swa", "8"],
}
PROMPT = [84, 104, 101, 32, 113, 117, 105, 99, 107, 32, 98, 114, 111, 119, 110, 32, 102, 111, 120]
STEPS = 16
