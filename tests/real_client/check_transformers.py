#!/usr/bin/env python3
"""A real client loads `ckpt convert --experts bf16` output and sees the same model.

Usage:
  check_transformers.py IN OUT              IN = original DeepSeek-V4 checkpoint (FP8 + MXFP4),
                                            OUT = its `ckpt convert --experts bf16` conversion
  check_transformers.py --ckpt CKPT IN      converts IN with the given ckpt binary first
Options: --device cpu|cuda (default cpu), --max-report N (mismatches listed, default 20).

Two comparisons, both must pass:
  A. transformers: AutoModelForCausalLM.from_pretrained(OUT, dtype=torch.bfloat16) loads with no
     missing / unexpected / mismatched keys and no error messages, and every parameter and
     persistent buffer equals (torch.equal, value for value; bit identity reported too) what
     transformers builds from IN with FineGrainedFP8Config(weight_block_size=[128, 128],
     dequantize=True). transformers' own Fp8Dequantize unpacks the MXFP4 experts (int8, two
     E2M1 codes a byte) and multiplies by their E8M0 scales in fp32, then rounds to BF16;
     DeepSeek-V4's `mtp.*` (DSpark / MTP) tensors are not part of transformers' model and are
     ignored on load (`_keys_to_ignore_on_load_unexpected`), so B covers them.
  B. safetensors, tensor by tensor under the checkpoint's own names (mtp.* included): an
     independent torch dequantization of IN (FP8 E4M3 x E8M0 block scale, or x F32
     weight_scale_inv; MXFP4 experts x E8M0 per 32 elements; both in fp32, one RNE to BF16)
     is bit-identical to OUT; every other tensor is copied unchanged; no scale survives.

Exit codes: 0 pass, 1 a mismatch or load problem, 2 usage, 77 skipped (torch, transformers
or safetensors not importable: the CTest hook registers that as skipped). Offline only: it
reads local files and never contacts the Hub.
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

try:
    import torch
    import transformers
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM, FineGrainedFP8Config
except Exception as e:  # noqa: BLE001 - any import failure means "not on this host"
    print(f"SKIP: transformers / torch / safetensors not importable here ({type(e).__name__}: {e})")
    sys.exit(SKIP)

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


class Report:
    def __init__(self, max_report):
        self.failures = 0
        self.max_report = max_report
        self.listed = 0

    def fail(self, message):
        self.failures += 1
        if self.listed < self.max_report:
            print("  MISMATCH " + message)
            self.listed += 1
        elif self.listed == self.max_report:
            print("  ... (further mismatches not listed)")
            self.listed += 1


# ---------------------------------------------------------------------------------- helpers

def bits(t):
    """The raw bit pattern, so that -0/+0 and NaN payloads compare exactly."""
    t = t.detach().cpu().contiguous()
    size = t.element_size()
    if t.dtype.is_floating_point:
        return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[size])
    return t


def describe_difference(a, b):
    """Count and largest difference of two same-shape tensors, for the report."""
    a32, b32 = a.detach().cpu().float(), b.detach().cpu().float()
    both_nan = torch.isnan(a32) & torch.isnan(b32)
    differ = (a32 != b32) & ~both_nan
    n = int(differ.sum())
    if n == 0:
        return "values equal, bits differ (signed zeros or NaN payloads)"
    diff = (a32 - b32).abs()
    diff[~differ] = 0
    flat = int(torch.argmax(diff.reshape(-1)))
    idx = list(torch.unravel_index(torch.tensor(flat), a32.shape)) if a32.dim() else []
    where = tuple(int(i) for i in idx)
    return (f"{n} of {a32.numel()} elements differ, max |diff| {float(diff.max()):.6g} at {where}: "
            f"{float(a32.reshape(-1)[flat])!r} vs {float(b32.reshape(-1)[flat])!r}")


def read_tensors(directory):
    """{name: tensor} of every shard in a checkpoint directory (small fixtures only)."""
    out = {}
    for path in sorted(pathlib.Path(directory).glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                out[name] = f.get_tensor(name)
    return out


def e8m0_to_f32(scale):
    """2^(b-127) built from the bit fields: b >= 1 is the fp32 with exponent field b, b = 0 the
    subnormal 2^-127; 0xFF becomes NaN."""
    b = scale.contiguous().view(torch.uint8).to(torch.int32)
    normal = (b << 23).view(torch.float32)
    sub = torch.full_like(normal, 2.0 ** -127)
    out = torch.where(b == 0, sub, normal)
    return torch.where(b == 255, torch.full_like(out, float("nan")), out)


def expand_blocks(scale_f32, rows, cols, block_rows, block_cols):
    """Block grid [ceil(rows/br), ceil(cols/bc)] -> per element [rows, cols]; partial last blocks
    share their block's scale."""
    s = scale_f32.repeat_interleave(block_rows, dim=0).repeat_interleave(block_cols, dim=1)
    return s[:rows, :cols]


def dequant_fp8(weight, scale, block):
    w = weight.view(torch.float8_e4m3fn).to(torch.float32)
    if scale.dtype == torch.float32:  # DeepSeek-V3 weight_scale_inv: one fp32 multiply
        s = scale
    else:
        s = e8m0_to_f32(scale)
    s = expand_blocks(s, w.shape[0], w.shape[1], block[0], block[1])
    return (w * s).to(torch.bfloat16)  # exact fp32 product (E8M0), one RNE


def dequant_mxfp4(packed, scale):
    u = packed.contiguous().view(torch.uint8).to(torch.int64)
    lut = torch.tensor(E2M1, dtype=torch.float32)
    codes = torch.stack([u & 0xF, u >> 4], dim=-1).reshape(u.shape[0], 2 * u.shape[1])
    w = lut[codes]
    s = e8m0_to_f32(scale).repeat_interleave(32, dim=1)
    return (w * s).to(torch.bfloat16)  # e2m1 x 2^k is exact in fp32; one RNE (never rounds)


def is_expert_weight(name):
    parts = name.split(".")
    return (len(parts) >= 5 and parts[-1] == "weight" and parts[-2] in ("w1", "w2", "w3")
            and parts[-3].isdigit() and parts[-4] == "experts" and parts[-5] == "ffn")


# ---------------------------------------------------------------------------------- checks

def check_config(out_dir, report):
    cfg = json.loads((pathlib.Path(out_dir) / "config.json").read_text())
    print(f"config: expert_dtype={cfg.get('expert_dtype')!r} torch_dtype={cfg.get('torch_dtype')!r} "
          f"quantization_config={'present' if 'quantization_config' in cfg else 'absent'} "
          f"ckptkit_conversion.experts={cfg.get('ckptkit_conversion', {}).get('experts')!r}")
    if "quantization_config" in cfg:
        report.fail("config.json still has quantization_config")
    if cfg.get("expert_dtype") != "bf16":
        report.fail(f"config.json expert_dtype is {cfg.get('expert_dtype')!r}, expected 'bf16'")
    if cfg.get("torch_dtype") != "bfloat16":
        report.fail(f"config.json torch_dtype is {cfg.get('torch_dtype')!r}, expected 'bfloat16'")


def loading_problems(info):
    return {k: sorted(v) if isinstance(v, (set, list)) else v for k, v in info.items() if v}


def state_of(model):
    """Parameters and persistent buffers, as transformers would save them."""
    return dict(model.state_dict())


def compare_transformers(in_dir, out_dir, device, report):
    print(f"A. transformers {transformers.__version__}, torch {torch.__version__}, device {device}")
    out_model, out_info = AutoModelForCausalLM.from_pretrained(
        out_dir, dtype=torch.bfloat16, output_loading_info=True, device_map=device, local_files_only=True)
    problems = loading_problems(out_info)
    print(f"  OUT loading info: {json.dumps({k: list(v) if isinstance(v, (set, list)) else v for k, v in out_info.items()}, default=str)[:2000]}")
    for key, value in problems.items():
        report.fail(f"loading OUT: {key} = {str(value)[:1500]}")
    qc = FineGrainedFP8Config(weight_block_size=[128, 128], dequantize=True)
    ref_model, ref_info = AutoModelForCausalLM.from_pretrained(
        in_dir, dtype=torch.bfloat16, quantization_config=qc, output_loading_info=True, device_map=device,
        local_files_only=True)
    ref_problems = loading_problems(ref_info)
    print(f"  IN (FineGrainedFP8Config dequantize=True) loading info: problems {json.dumps(ref_problems, default=str)[:1500]}")
    for key, value in ref_problems.items():
        report.fail(f"loading IN: {key} = {str(value)[:1500]}")
    print(f"  model classes: OUT {type(out_model).__name__}, IN {type(ref_model).__name__}")
    ours, theirs = state_of(out_model), state_of(ref_model)
    if set(ours) != set(theirs):
        report.fail(f"state_dict keys differ: only OUT {sorted(set(ours) - set(theirs))[:20]}, "
                    f"only IN {sorted(set(theirs) - set(ours))[:20]}")
    equal = bit_equal = 0
    elements = 0
    widened = []  # same values, different dtype (see below)
    for name in sorted(set(ours) & set(theirs)):
        a, b = ours[name].detach().cpu(), theirs[name].detach().cpu()
        if a.shape != b.shape:
            report.fail(f"{name}: OUT {tuple(a.shape)} {a.dtype} vs IN {tuple(b.shape)} {b.dtype}")
            continue
        elements += a.numel()
        if a.dtype != b.dtype:
            # transformers keeps `_keep_in_fp32_modules_strict` (the RMSNorm weights among them)
            # in float32 when it loads a plain BF16 checkpoint, but leaves them BF16 on its FP8
            # quantizer path. The checkpoint stores them in BF16 either way (same bytes in IN
            # and OUT), so the float32 copy is an exact widening: compare the values.
            if a.dtype.is_floating_point and b.dtype.is_floating_point and torch.equal(a.double(), b.double()):
                equal += 1
                widened.append(f"{name} ({a.dtype} vs {b.dtype})")
            else:
                report.fail(f"{name}: OUT {a.dtype} vs IN {b.dtype}, and the values differ: "
                            f"{describe_difference(a, b) if a.dtype.is_floating_point and b.dtype.is_floating_point else ''}")
            continue
        if torch.equal(a, b) or (a.dtype.is_floating_point and describe_difference(a, b).startswith("values equal")):
            equal += 1
            if torch.equal(bits(a), bits(b)):
                bit_equal += 1
            else:
                print(f"  note {name}: values equal, bits differ ({describe_difference(a, b)})")
        else:
            report.fail(f"{name} {tuple(a.shape)} {a.dtype}: {describe_difference(a, b)}")
    print(f"  compared {len(set(ours) & set(theirs))} parameters/buffers ({elements:,} elements): "
          f"{equal} equal value for value, {bit_equal} of them bit-identical in the same dtype, "
          f"{len(widened)} equal in value with a different dtype")
    if widened:
        print("  dtype differs, values equal (transformers keeps _keep_in_fp32_modules_strict in float32 for a "
              "plain BF16 checkpoint, not on its FP8 quantizer path): " + ", ".join(widened))
    experts = [n for n in ours if n.endswith("experts.gate_up_proj") or n.endswith("experts.down_proj")]
    print(f"  of which fused expert tensors: {len(experts)} (e.g. {experts[0] if experts else '-'} "
          f"{tuple(ours[experts[0]].shape) if experts else ''})")
    return len(ours)


def compare_safetensors(in_dir, out_dir, report):
    print("B. independent torch dequantization of IN vs OUT, tensor by tensor")
    cfg = json.loads((pathlib.Path(in_dir) / "config.json").read_text())
    block = cfg.get("quantization_config", {}).get("weight_block_size", [128, 128])
    src, dst = read_tensors(in_dir), read_tensors(out_dir)
    # The scales the conversion consumes: FP8 weights' and MXFP4 experts' (they sort before
    # their ".weight", so collect them first).
    consumed = set()
    for name, t in src.items():
        base = name[:-len(".weight")] if name.endswith(".weight") else name
        if t.dtype == torch.float8_e4m3fn:
            consumed.update(s for s in (base + ".scale", base + ".weight_scale_inv") if s in src)
        elif t.dtype == torch.int8 and is_expert_weight(name) and base + ".scale" in src:
            consumed.add(base + ".scale")
    kinds = {"fp8": 0, "mxfp4": 0, "copied": 0}
    for name, t in sorted(src.items()):
        if name in consumed:
            continue
        if t.dtype == torch.float8_e4m3fn:
            base = name[:-len(".weight")] if name.endswith(".weight") else name
            scale_name = next((s for s in (base + ".scale", base + ".weight_scale_inv") if s in src), None)
            if scale_name is None:
                report.fail(f"{name}: FP8 without a scale in IN")
                continue
            consumed.add(scale_name)
            want, kind = dequant_fp8(t, src[scale_name], block), "fp8"
        elif t.dtype == torch.int8 and is_expert_weight(name):
            scale_name = name[:-len(".weight")] + ".scale"
            consumed.add(scale_name)
            want, kind = dequant_mxfp4(t, src[scale_name]), "mxfp4"
        else:
            want, kind = t, "copied"
        got = dst.get(name)
        if got is None:
            report.fail(f"{name}: missing in OUT")
            continue
        if got.dtype != want.dtype or got.shape != want.shape:
            report.fail(f"{name}: OUT {tuple(got.shape)} {got.dtype}, expected {tuple(want.shape)} {want.dtype}")
            continue
        if not torch.equal(bits(got), bits(want)):
            report.fail(f"{name} ({kind}): {describe_difference(got, want)}")
            continue
        kinds[kind] += 1
    for name in sorted(consumed):
        if name in dst:
            report.fail(f"{name}: a consumed scale is still in OUT")
    extra = sorted(set(dst) - set(src))
    if extra:
        report.fail(f"OUT has tensors IN does not: {extra[:20]}")
    mtp = sum(1 for n in dst if n.startswith("mtp."))
    print(f"  bit-identical: {kinds['fp8']} FP8->BF16, {kinds['mxfp4']} MXFP4 experts->BF16, "
          f"{kinds['copied']} copied; {len(consumed)} scales consumed; OUT has {len(dst)} tensors "
          f"({mtp} under mtp.*)")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("input")
    p.add_argument("output", nargs="?")
    p.add_argument("--ckpt", help="convert INPUT with this ckpt binary (--experts bf16) into a temp dir")
    p.add_argument("--device", default="cpu")
    p.add_argument("--max-report", type=int, default=20)
    a = p.parse_args()
    if bool(a.output) == bool(a.ckpt):
        p.error("give OUT, or --ckpt to convert IN first (not both)")
    report = Report(a.max_report)
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = a.output
        if a.ckpt:
            out_dir = os.path.join(tmp, "bf16")
            run = subprocess.run([a.ckpt, "convert", "-q", "--experts", "bf16", a.input, out_dir],
                                 capture_output=True, text=True)
            print(f"ckpt convert --experts bf16: exit {run.returncode}")
            if run.returncode != 0:
                print(run.stdout + run.stderr)
                return 1
        check_config(out_dir, report)
        try:
            compare_transformers(a.input, out_dir, a.device, report)
        except Exception as e:  # noqa: BLE001 - report and go on to the independent comparison
            import traceback
            traceback.print_exc()
            report.fail(f"transformers comparison raised {type(e).__name__}: {e}")
        compare_safetensors(a.input, out_dir, report)
    if report.failures:
        print(f"FAIL: {report.failures} mismatch(es)")
        return 1
    print("PASS: OUT loads in transformers exactly as IN does (A), and equals an independent "
          "dequantization of IN tensor for tensor (B)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
