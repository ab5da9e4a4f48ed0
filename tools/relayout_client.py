#!/usr/bin/env python3
"""The real-client check of a ckpt relayout output (docs/ckpt-relayout.md "Proof"): transformers
loads IN and OUT with FineGrainedFP8Config(dequantize=True) on the CPU and every parameter of
OUT must equal IN's (torch.equal: the same bits).

transformers derives an FP8 weight's block as rows / scale_rows (and cols / scale_cols), which is
wrong on a ragged grid (a 192-row weight on a 128 grid has 2 scale rows: it uses blocks of 96).
Where IN's grid is ragged in that sense, transformers' IN is not the reference: the reference is
then IN dequantized here with exact arithmetic and the true block from config.json
(bf16(fp32(e4m3) * fp32(scale)), one multiply, one rounding: what the FP8 format means), written
as a BF16 checkpoint and loaded by transformers without quantization, so the parameter mapping is
transformers' own. The same is done for OUT when its grid is ragged. The output says which.

Usage: relayout_client.py IN OUT
Exit 0: every parameter equal; 1: a mismatch; 2: usage; 77: skipped (torch, transformers or
safetensors not importable, as tests/real_client/check_families.py). Offline only. Prints one
line per mismatch and a summary."""
import json
import os
import shutil
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def fail_usage(msg):
    print(f"relayout_client: {msg}", file=sys.stderr)
    sys.exit(2)


if len(sys.argv) != 3:
    fail_usage("usage: relayout_client.py IN OUT")
IN, OUT = sys.argv[1], sys.argv[2]
try:
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, FineGrainedFP8Config
except ImportError as e:
    print(f"relayout_client: skipped: needs torch, transformers and safetensors ({e})", file=sys.stderr)
    sys.exit(77)


def block_of(path):
    cfg = json.load(open(os.path.join(path, "config.json")))
    return tuple(cfg["quantization_config"]["weight_block_size"])


def shard_files(path):
    return sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))


def shard_of_tensor(path):
    """Every tensor name of the checkpoint -> the shard holding it (a weight's scale may be in
    another shard than the weight: the DeepSeek-V3 fixture has such pairs)."""
    where = {}
    for f in shard_files(path):
        with safe_open(os.path.join(path, f), framework="pt") as s:
            for k in s.keys():
                where[k] = f
    return where


def fp8_pairs(path):
    """(weight name, weight shard, scale name, scale shard) of every weight with a block scale."""
    where = shard_of_tensor(path)
    return [(k, f, k[:-7] + ".weight_scale_inv", where[k[:-7] + ".weight_scale_inv"])
            for k, f in sorted(where.items()) if k.endswith(".weight") and k[:-7] + ".weight_scale_inv" in where]


def shape_of(path, shard, name):
    with safe_open(os.path.join(path, shard), framework="pt") as h:
        return h.get_slice(name).get_shape()


def grid_differs(n, scales, block):
    """Whether an axis of n elements with `scales` scale entries maps some element to another
    scale under transformers' derived block (n // scales) than under the true one."""
    derived = n // scales
    return derived == 0 or any(i // derived != i // block for i in range(n))


def ragged(path):
    """The FP8 weights whose block transformers derives wrongly (rows / scale_rows, cols / scale_cols)
    in a way that changes which scale some element takes."""
    bn, bk = block_of(path)
    bad = []
    for w, wf, s, sf in fp8_pairs(path):
        rows, cols = shape_of(path, wf, w)
        sr, sc = shape_of(path, sf, s)
        if grid_differs(rows, sr, bn) or grid_differs(cols, sc, bk):
            bad.append(f"{w} [{rows}, {cols}] with scales [{sr}, {sc}]: transformers derives block "
                       f"{rows // sr}x{cols // sc}, the checkpoint's is {bn}x{bk}")
    return bad


def exact_bf16_copy(path, dst):
    """path dequantized with exact arithmetic and its true block into a BF16 checkpoint at dst."""
    bn, bk = block_of(path)
    where = shard_of_tensor(path)
    os.makedirs(dst, exist_ok=True)
    for f in shard_files(path):
        tensors = {}
        with safe_open(os.path.join(path, f), framework="pt") as h:
            keys = list(h.keys())
            for k in keys:
                if k.endswith(".weight_scale_inv"):
                    continue
                t = h.get_tensor(k)
                if t.dtype == torch.float8_e4m3fn:
                    sname = k[:-7] + ".weight_scale_inv"
                    with safe_open(os.path.join(path, where[sname]), framework="pt") as hs:
                        scale = hs.get_tensor(sname).to(torch.float32)
                    rows, cols = t.shape
                    grid = scale.repeat_interleave(bn, 0)[:rows].repeat_interleave(bk, 1)[:, :cols]
                    t = (t.to(torch.float32) * grid).to(torch.bfloat16)  # one f32 multiply, one RNE
                tensors[k] = t.contiguous()
        save_file(tensors, os.path.join(dst, f), metadata={"format": "pt"})
    cfg = json.load(open(os.path.join(path, "config.json")))
    cfg.pop("quantization_config", None)
    cfg.pop("ckptkit_relayout", None)
    json.dump(cfg, open(os.path.join(dst, "config.json"), "w"), indent=1)
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(index):
        idx = json.load(open(index))
        idx["weight_map"] = {k: v for k, v in idx["weight_map"].items() if not k.endswith(".weight_scale_inv")}
        json.dump(idx, open(os.path.join(dst, "model.safetensors.index.json"), "w"))


def load(path, quantized=True):
    kw = {"dtype": torch.bfloat16, "device_map": "cpu"}
    if quantized:
        kw["quantization_config"] = FineGrainedFP8Config(dequantize=True)
    return AutoModelForCausalLM.from_pretrained(path, **kw).state_dict()


def transformers_on_ragged_in(exact):
    """What transformers' own load of a ragged IN gives against the exact reference: the
    evidence that it is not the reference there (its parameters that differ, or its error)."""
    try:
        own = load(IN, True)
    except Exception as e:  # its derived block may not even fit the weight
        return f"transformers' own load of IN fails: {type(e).__name__}: {str(e)[:200]}"
    differ = [n for n in exact if n in own and (own[n].shape != exact[n].shape or not torch.equal(own[n], exact[n]))]
    return (f"transformers' own load of IN differs from IN's exact dequantization in {len(differ)} of {len(exact)} "
            f"parameters (its ragged-grid block), e.g. {differ[:2]}")


def main():
    tmp = tempfile.mkdtemp(prefix="relayout-client-")
    try:
        reference, what = IN, "IN loaded by transformers (FineGrainedFP8Config(dequantize=True))"
        ref_quantized = True
        bad_in = ragged(IN)
        if bad_in:
            print(f"IN: {len(bad_in)} weights on a ragged grid that transformers reads wrongly (it derives the block as "
                  f"rows / scale_rows); the reference is IN dequantized here with exact arithmetic and the true block:")
            for line in bad_in[:5]:
                print("  " + line)
            exact_bf16_copy(IN, os.path.join(tmp, "in-exact"))
            reference, what, ref_quantized = os.path.join(tmp, "in-exact"), "IN dequantized exactly (ragged grid)", False
        candidate, cand_quantized, cwhat = OUT, True, "OUT loaded by transformers"
        bad_out = ragged(OUT)
        if bad_out:
            print(f"OUT: {len(bad_out)} weights on a grid transformers reads wrongly; OUT is dequantized here exactly too")
            exact_bf16_copy(OUT, os.path.join(tmp, "out-exact"))
            candidate, cand_quantized, cwhat = os.path.join(tmp, "out-exact"), False, "OUT dequantized exactly"
        a, b = load(reference, ref_quantized), load(candidate, cand_quantized)
        if bad_in:
            print(transformers_on_ragged_in(a))
        mismatches = 0
        for name in sorted(set(a) | set(b)):
            if name not in a or name not in b:
                print(f"MISMATCH {name}: only in {'OUT' if name in b else 'IN'}")
                mismatches += 1
                continue
            x, y = a[name], b[name]
            if x.dtype != y.dtype or x.shape != y.shape or not torch.equal(x, y):
                diff = (x.float() - y.float()).abs() if x.shape == y.shape else None
                where = "" if diff is None else f", {int((diff != 0).sum())} elements differ, max |d| {float(diff.max()):.3g}"
                print(f"MISMATCH {name}: {x.dtype}{list(x.shape)} vs {y.dtype}{list(y.shape)}{where}")
                mismatches += 1
        print(f"compared {len(a)} parameters: {cwhat} against {what}: "
              f"{'all equal (torch.equal)' if mismatches == 0 else f'{mismatches} differ'}")
        return 0 if mismatches == 0 else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


sys.exit(main())
