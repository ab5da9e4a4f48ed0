#!/usr/bin/env python3
"""Regenerates the checked-in seed corpus tests/fuzz/corpus/<target>/ (run from anywhere).

    python3 tests/fuzz/make_corpus.py [BUILD_DIR]

Sources, all small (<= 64 KiB a file):
  * the read-only fixtures in tests/fixtures (small files whole; large safetensors and
    GGUF files cut to their header, which the readers then report as truncated);
  * the corruption tables of tests/formats/{safetensors,gguf}_test.cpp, written by the test
    suite itself when CKPT_FUZZ_SEED_DIR is set (needs BUILD_DIR/ckpt_tests);
  * a manifest written by `ckpt repack-experts` on the qwen3next fixture (needs BUILD_DIR/ckpt);
  * for ggml_dequant, one seed per supported type index (first byte) with a few blocks.
Files under corpus/<target>/regress-* (inputs that once broke something) are kept as is.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
CORPUS = ROOT / "tests" / "fuzz" / "corpus"
MAX_SEED = 64 * 1024
TARGETS = ["safetensors_header", "index_json", "config_dsv4", "gguf_header", "ggml_dequant", "expert_pack_manifest"]


def put(target, name, data):
    if len(data) > MAX_SEED:
        data = data[:MAX_SEED]
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)


def safe_name(p):
    return str(p.relative_to(FIXTURES)).replace("/", "_")


def safetensors_seeds():
    for p in sorted(FIXTURES.rglob("*.safetensors")):
        data = p.read_bytes()
        if len(data) <= MAX_SEED:
            put("safetensors_header", safe_name(p), data)
            continue
        n = struct.unpack("<Q", data[:8])[0]
        if 8 + n <= MAX_SEED:  # the header alone: every tensor then lies past the end of the file
            put("safetensors_header", "header-" + safe_name(p), data[: 8 + n])


def gguf_seeds():
    for p in sorted(FIXTURES.rglob("*.gguf")):
        data = p.read_bytes()
        put("gguf_header", ("" if len(data) <= MAX_SEED else "head-") + safe_name(p), data[:MAX_SEED])


def json_seeds():
    for p in sorted(FIXTURES.rglob("model.safetensors.index.json")):
        put("index_json", safe_name(p), p.read_bytes())
    # The two metadata forms and the duplicate-key case the reader must see.
    put("index_json", "empty-metadata.json", b'{"metadata":{},"weight_map":{"a":"model-00001-of-00001.safetensors"}}')
    put("index_json", "duplicate-key.json", b'{"weight_map":{"a":"x.safetensors","a":"y.safetensors"}}')
    put("index_json", "bad-path.json", b'{"metadata":{"total_size":8},"weight_map":{"a":"../x.safetensors"}}')
    for p in sorted(FIXTURES.rglob("config.json")):
        put("config_dsv4", safe_name(p), p.read_bytes())
        put("config_tensors", safe_name(p), p.read_bytes())
    base = json.loads((FIXTURES / "oracle" / "dsv4-tiny" / "config.json").read_text())
    preview = dict(base)
    for k in [k for k in preview if k.startswith("dspark_")]:
        del preview[k]
    preview["compress_ratios"] = base["compress_ratios"][: base["num_hidden_layers"] + 1]
    put("config_dsv4", "preview-layout.json", json.dumps(preview).encode())
    noquant = dict(base)
    del noquant["quantization_config"]
    put("config_dsv4", "no-quantization-config.json", json.dumps(noquant).encode())


def dequant_seeds():
    # The target maps the first byte to the index of a supported type (mod their number),
    # so bytes 0..63 cover every type; the payload is a deterministic pseudo-random mix
    # with fp16 scales of 1.0 sprinkled in so that values are finite.
    state = 0x9E3779B97F4A7C15
    for t in range(64):
        out = bytearray([t])
        for _ in range(512):
            state = (state * 6364136223846793005 + 1442695040888963407) & (2**64 - 1)
            out.append((state >> 33) & 0xFF)
        out[1:3] = b"\x00\x3c"
        put("ggml_dequant", "type%02d" % t, bytes(out))


def suite_seeds(build):
    tests = build / "ckpt_tests"
    if not tests.exists():
        print("no %s: skipping the corruption-table seeds" % tests, file=sys.stderr)
        return
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, CKPT_FUZZ_SEED_DIR=tmp)
        subprocess.run([str(tests), "--gtest_filter=GgufCorruption.EachCaseReportsItsCode:GgufBuilt.BaseFileIsValid:"
                        "Rules/SafetensorsRule.*"], env=env, check=True, stdout=subprocess.DEVNULL)
        for target_dir in Path(tmp).iterdir():
            for f in target_dir.iterdir():
                put(target_dir.name, f.name, f.read_bytes())


def manifest_seeds(build):
    ckpt = build / "ckpt"
    if not ckpt.exists():
        print("no %s: skipping the manifest seed" % ckpt, file=sys.stderr)
        return
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "pack"
        subprocess.run([str(ckpt), "repack-experts", str(FIXTURES / "ggml" / "qwen3next-tiny.gguf"), str(out), "-q"],
                       check=True)
        text = (out / "manifest.json").read_bytes()
    put("expert_pack_manifest", "qwen3next-tiny.manifest.json", text)
    m = json.loads(text)
    m["blobs"] = m["blobs"][:2]
    put("expert_pack_manifest", "two-blobs.json", json.dumps(m).encode())
    bad = json.loads(json.dumps(m))
    bad["experts_file"]["name"] = "../experts.bin"
    bad["alignment"] = 24
    put("expert_pack_manifest", "bad-name-alignment.json", json.dumps(bad).encode())
    overlap = json.loads(json.dumps(m))
    if len(overlap["blobs"]) > 1:
        overlap["blobs"][1]["offset"] = overlap["blobs"][0]["offset"]
    put("expert_pack_manifest", "overlap.json", json.dumps(overlap).encode())
    tree_seeds(ckpt)


def tree_seeds(ckpt):
    """$.source.sha256_tree: a well-formed tree of 8 chunks and the faults the reader refuses."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "pack"
        subprocess.run([str(ckpt), "repack-experts", str(FIXTURES / "ggml" / "qwen3next-tiny.gguf"), str(out), "-q",
                        "--tree-chunk", "1048576"], check=True)
        m = json.loads((out / "manifest.json").read_bytes())
    m["blobs"] = m["blobs"][:2]
    put("expert_pack_manifest", "tree-8-chunks.json", json.dumps(m).encode())
    faults = {
        "tree-chunk-size-zero.json": lambda t: t.update(chunk_size=0),
        "tree-chunk-size-huge.json": lambda t: t.update(chunk_size=1 << 62),
        "tree-count-short.json": lambda t: t.update(chunks=t["chunks"][:-1]),
        "tree-bad-hex.json": lambda t: t.update(chunks=["Z" * 64] + t["chunks"][1:]),
        "tree-bad-root.json": lambda t: t.update(root="0" * 64),
    }
    for name, fault in faults.items():
        bad = json.loads(json.dumps(m))
        fault(bad["source"]["sha256_tree"])
        put("expert_pack_manifest", name, json.dumps(bad).encode())


def main():
    build = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT / "build"
    for t in TARGETS:
        d = CORPUS / t
        if d.exists():
            for f in d.iterdir():
                if not f.name.startswith("regress-"):
                    f.unlink()
    safetensors_seeds()
    gguf_seeds()
    json_seeds()
    dequant_seeds()
    suite_seeds(build)
    manifest_seeds(build)
    total = sum(f.stat().st_size for f in CORPUS.rglob("*") if f.is_file())
    print("corpus: %d files, %d bytes" % (sum(1 for f in CORPUS.rglob("*") if f.is_file()), total))


if __name__ == "__main__":
    main()
