#!/usr/bin/env python3
"""transformers loads each converted family as a plain BF16 model (run on the GPU host).

Usage:
  check_families.py --ckpt CKPT [--families DIR] [--device cpu|cuda] [--family NAME ...]

For each family of DIR (default tests/fixtures/families: qwen3moe-fp8, dsv3-fp8, gptoss-mxfp4):
  1. `CKPT convert -q --experts bf16 DIR/FAMILY/in OUT` (a fresh temporary OUT);
  2. AutoModelForCausalLM.from_pretrained(OUT, dtype=torch.bfloat16, output_loading_info=True)
     must load with no missing / unexpected / mismatched keys and no error messages, and its
     config must carry no quantization_config;
  3. every parameter must equal (torch.equal, bit for bit) DIR/FAMILY/ref-transformers/
     state_dict.safetensors (what transformers 5.17 builds from `in/` with dequantize=True),
     except where that reference misplaces a ragged FP8 grid (a weight whose rows are not a
     multiple of its 128 block: transformers derives the block as rows / scale_rows); there
     the parameter must equal the exact arithmetic bf16_rne(fp32(e4m3) * fp32(scale)) on the
     128 x 128 ceil grid, computed here element-wise in torch from `in/`.
Exit codes: 0 pass, 1 a mismatch or load problem, 2 usage, 77 skipped (torch, transformers or
safetensors not importable). Offline only.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
SKIP = 77
FAMILIES = ["qwen3moe-fp8", "dsv3-fp8", "gptoss-mxfp4"]


def load_safetensors_dir(path):
    from safetensors.torch import load_file
    out = {}
    for f in sorted(pathlib.Path(path).glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


def exact_fp8(torch, weight, scale, block=128):
    """bf16_rne(fp32(e4m3) * fp32(scale)) on the ceil grid: partial blocks share their scale."""
    rows, cols = weight.shape
    s = scale.to(torch.float32)
    s = s.repeat_interleave(block, 0)[:rows].repeat_interleave(block, 1)[:, :cols]
    return (weight.to(torch.float32) * s).to(torch.bfloat16)


def ragged_exact(torch, src):
    """Parameters of ragged FP8 weights (rows % 128 != 0), computed exactly from the input."""
    out = {}
    for name, t in src.items():
        if t.dtype != torch.float8_e4m3fn or not name.endswith(".weight"):
            continue
        scale = src.get(name + "_scale_inv")
        if scale is None or t.dim() != 2 or t.shape[0] % 128 == 0:
            continue
        out[name] = exact_fp8(torch, t, scale)
    return out


def check_family(args, torch, family) -> int:
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    root = pathlib.Path(args.families) / family
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "out"
        r = subprocess.run([args.ckpt, "convert", "-q", "--experts", "bf16", str(root / "in"), str(out)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(f"FAIL {family}: convert exited {r.returncode}: {r.stderr.strip()[:400]}")
            return 1
        cfg = json.loads((out / "config.json").read_text())
        if "quantization_config" in cfg:
            print(f"FAIL {family}: the converted config still has quantization_config")
            failures += 1
        model, info = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.bfloat16, output_loading_info=True,
                                                          device_map=args.device)
        for key in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
            if info.get(key):
                print(f"FAIL {family}: {key}: {list(info[key])[:10]}")
                failures += 1
        ref = load_file(str(root / "ref-transformers" / "state_dict.safetensors"))
        exact = ragged_exact(torch, load_safetensors_dir(root / "in"))
        params = dict(model.named_parameters())
        params.update(dict(model.named_buffers()))
        compared = ragged = 0
        for name, want in ref.items():
            got = params.get(name)
            if got is None:
                print(f"FAIL {family}: {name} missing from the loaded model")
                failures += 1
                continue
            got = got.detach().to("cpu")
            if name in exact:
                ragged += 1
                if not torch.equal(got, exact[name]):
                    print(f"FAIL {family}: {name} differs from the exact arithmetic (ragged grid)")
                    failures += 1
                continue
            compared += 1
            if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
                print(f"FAIL {family}: {name} {tuple(got.shape)} {got.dtype} != reference {tuple(want.shape)} {want.dtype}")
                failures += 1
        print(f"{'ok  ' if failures == 0 else 'FAIL'} {family}: {compared} parameters equal the reference, "
              f"{ragged} ragged ones equal the exact arithmetic; no missing/unexpected keys" if failures == 0 else
              f"FAIL {family}: {failures} problems")
    return 1 if failures else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ckpt", required=True)
    p.add_argument("--families", default=str(pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "families"))
    p.add_argument("--device", default="cpu")
    p.add_argument("--family", action="append")
    try:
        args = p.parse_args()
    except SystemExit as e:
        return 2 if e.code else 0
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
        import safetensors  # noqa: F401
    except ImportError as e:
        print(f"skipped: {e}")
        return SKIP
    import torch
    failed = 0
    for family in args.family or FAMILIES:
        failed += check_family(args, torch, family)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
