#!/usr/bin/env python3
"""Runs ckpt on fixtures and checks every --json output against schemas/*.schema.json.

Usage: check_schemas.py CKPT SOURCE_DIR [FIXTURES_DIR] (default SOURCE_DIR/tests/fixtures). Exit 0 when every document validates."""
import json
import pathlib
import subprocess
import sys

import jsonschema


def main() -> int:
    ckpt, source = sys.argv[1], pathlib.Path(sys.argv[2])
    fixtures = pathlib.Path(sys.argv[3]) if len(sys.argv) > 3 else source / "tests" / "fixtures"
    schemas = {p.name: json.loads(p.read_text()) for p in (source / "schemas").glob("*.schema.json")}
    # Our $id values are names, not URLs; older jsonschema resolves local "#/$defs" refs
    # against $id and fails, so validate with the $id removed.
    for schema in schemas.values():
        schema.pop("$id", None)
    runs = [
        ("validation-report.schema.json", ["validate", "--json", "-", str(fixtures / "oracle/dsv4-tiny")]),
        ("validation-report.schema.json", ["validate", "--deep", "--sha256", "--json", "-", str(fixtures / "ggml/qwen3next-tiny.gguf")]),
        ("validation-report.schema.json", ["validate", "--profile", "generic", "--json", "-", str(fixtures / "oracle/dsv4-edge")]),
        ("validation-report.schema.json", ["validate", "--json", "-", "/nonexistent"]),
        ("inspect.schema.json", ["inspect", "--json", str(fixtures / "oracle/dsv4-tiny")]),
        ("convert-report.schema.json", ["convert", "--dry-run", "--json", "-", str(fixtures / "oracle/dsv4-tiny"), "/tmp/ckpt-schema-out"]),
        ("convert-report.schema.json", ["convert", "--dry-run", "--json", "-", str(fixtures / "oracle/dsv4-edge.qw-bf16"), "/tmp/ckpt-schema-out"]),
        ("convert-report.schema.json", ["convert", "--dry-run", "--experts", "int8-shift", "--json", "-", str(fixtures / "oracle/dsv4-tiny"), "/tmp/ckpt-schema-out"]),
        ("convert-report.schema.json", ["convert", "--dry-run", "--experts", "bf16", "--json", "-", str(fixtures / "oracle/dsv4-tiny"), "/tmp/ckpt-schema-out"]),
        ("inspect.schema.json", ["inspect", "--json", str(fixtures / "ggml/qwen3next-tiny.gguf")]),
        ("validation-report.schema.json", ["validate", "--deep", "--partition", "1/3", "--json", "-", str(fixtures / "oracle/dsv4-tiny")]),
        ("convert-report.schema.json", ["convert", "--dry-run", "--partition", "2/3", "--json", "-", str(fixtures / "oracle/dsv4-tiny"), "/tmp/ckpt-schema-out"]),
        ("hash-manifest.schema.json", ["hash", str(fixtures / "oracle/dsv4-tiny")]),
        ("hash-manifest.schema.json", ["hash", "--algo", "both", "--dequant", str(fixtures / "ggml/qwen3next-tiny.gguf")]),
        ("hash-manifest.schema.json", ["hash", "--algo", "sha256", "--dequant", str(fixtures / "oracle/dsv4-edge")]),
        ("diff-report.schema.json", ["diff", "--json", "-", str(fixtures / "oracle/dsv4-tiny"), str(fixtures / "oracle/dsv4-tiny.qw-bf16")]),
        ("diff-report.schema.json", ["diff", "--json", "-", str(fixtures / "oracle/dsv4-edge.qw-bf16"), str(fixtures / "oracle/dsv4-tiny.qw-bf16")]),
        ("diff-report.schema.json", ["diff", "--json", "-", str(fixtures / "oracle/dsv3-tiny"), str(fixtures / "oracle/dsv3-tiny")]),
        ("diff-report.schema.json", ["diff", "--json", "-", str(fixtures / "oracle/dsv3-tiny"), "/nonexistent"]),
        ("preflight-report.schema.json", ["preflight", "--tp", "8", "--gpu", "sm80", "--gpu-memory", "80G", "--json", "-", str(fixtures / "preflight/qwen3-235b-a22b-fp8")]),
        ("preflight-report.schema.json", ["preflight", "--tp", "8", "--ep", "8", "--json", "-", str(fixtures / "preflight/qwen3-235b-a22b-fp8")]),
        ("preflight-report.schema.json", ["preflight", "--gpu", "sm80", "--json", "-", str(fixtures / "oracle/dsv4-tiny")]),
        ("preflight-report.schema.json", ["preflight", "--tp", "2", "--json", "-", str(fixtures / "families/gptoss-mxfp4/in")]),
        ("preflight-report.schema.json", ["preflight", "--json", "-", "/nonexistent"]),
        ("relayout-report.schema.json", ["relayout", "--dry-run", "--tp", "2", "--json", "-", str(fixtures / "families/dsv3-fp8/in"), "/tmp/ckpt-schema-out"]),
        ("relayout-report.schema.json", ["relayout", "--dry-run", "--tp", "4", "--min-block", "64x64", "--json", "-", str(fixtures / "families/qwen3moe-fp8/in"), "/tmp/ckpt-schema-out"]),
        ("relayout-report.schema.json", ["relayout", "--dry-run", "--tp", "2", "--json", "-", str(fixtures / "families/gptoss-mxfp4/in"), "/tmp/ckpt-schema-out"]),
        ("relayout-report.schema.json", ["relayout", "--tp", "2", "--json", "-", "/nonexistent", "/tmp/ckpt-schema-out"]),
        ("preflight-report.schema.json", ["preflight", "--tp", "8", "--ep", "8", "--gpu-memory", "141G", "--max-model-len", "32768", "--json", "-", str(fixtures / "preflight/qwen3.5-397b-a17b-fp8")]),
        ("preflight-report.schema.json", ["preflight", "--tp", "8", "--kv-cache-dtype", "fp8", "--gpu-memory", "141G", "--json", "-", str(fixtures / "preflight/deepseek-r1-fp8")]),
    ]
    failed = 0
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        # An expert pack's manifest (written by repack-experts, not printed): check the file itself.
        # By default the tree alone names the source; --source-sha256 adds the whole-file digest.
        for pack, extra in ((tmp + "/pack", []), (tmp + "/pack-whole", ["--source-sha256"])):
            subprocess.run([ckpt, "repack-experts", "-q", *extra, str(fixtures / "ggml/qwen3next-tiny.gguf"), pack],
                           capture_output=True)
            try:
                manifest = json.loads(pathlib.Path(pack + "/manifest.json").read_text())
                jsonschema.Draft202012Validator(schemas["expert-pack-manifest.schema.json"]).validate(manifest)
                if ("sha256" in manifest["source"]) != bool(extra):
                    raise ValueError(f"repack-experts {' '.join(extra)}: source.sha256 written: {'sha256' in manifest['source']}")
                print(f"ok   expert-pack-manifest.schema.json: repack-experts {' '.join(extra)} qwen3next-tiny.gguf")
            except Exception as e:
                failed += 1
                print(f"FAIL expert-pack-manifest.schema.json: {str(e)[:400]}")
        # A --experts bf16 conversion, then its validation against the input.
        subprocess.run([ckpt, "convert", "-q", "--experts", "bf16", str(fixtures / "oracle/dsv4-tiny"), tmp + "/bf16"],
                       capture_output=True)
        runs.append(("validation-report.schema.json",
                     ["validate", "--deep", "--reference", str(fixtures / "oracle/dsv4-tiny"), "--json", "-",
                      tmp + "/bf16"]))
        # ckpt-gpu (built beside ckpt) with the host emulation of the kernels: no GPU needed.
        gpu = str(pathlib.Path(ckpt).parent / "ckpt-gpu")
        # With --stats the summary has the stage times too (an INT8-shift conversion: every stage).
        subprocess.run([ckpt, "convert", "-q", "--experts", "int8-shift", str(fixtures / "oracle/dsv4-tiny"),
                        tmp + "/int8"], capture_output=True)
        for args in (["--json", "-", str(fixtures / "ggml/qwen3next-tiny.gguf")],
                     ["--json", "-", str(fixtures / "oracle/dsv4-tiny")],
                     ["--json", "-", "--reference", str(fixtures / "oracle/dsv4-tiny"), tmp + "/bf16"],
                     ["--stats", "--json", "-", "--reference", str(fixtures / "oracle/dsv4-tiny"), tmp + "/int8"],
                     ["--stats", "--json", "-", str(fixtures / "ggml/qwen3next-tiny.gguf")]):
            runs.append(("verify-report.schema.json", [gpu, "verify", "--backend", "emulate", *args]))
        # repack-experts --json: a repack, and a refused one (the same OUT_DIR again, not empty).
        for out_dir in (tmp + "/pack-json", tmp + "/pack-json"):
            runs.append(("repack-report.schema.json",
                         ["repack-experts", "-q", "--json", "-", str(fixtures / "ggml/qwen3next-tiny.gguf"), out_dir]))
        runs.append(("repack-report.schema.json", ["repack-experts", "--json", "-", "/nonexistent.gguf", tmp + "/pack-none"]))
        # inspect and ckpt-gpu verify print a report when the input cannot be loaded.
        runs.append(("inspect.schema.json", ["inspect", "--json", "-", "/nonexistent"]))
        runs.append(("verify-report.schema.json", [gpu, "verify", "--backend", "emulate", "--json", "-", "/nonexistent"]))
        # The default GPU backend: a report whether or not this machine has a GPU (exit 4 when not).
        runs.append(("verify-report.schema.json", [gpu, "verify", "--json", "-", "/nonexistent"]))
        # The expert pack's hash manifest.
        runs.append(("hash-manifest.schema.json", ["hash", "--dequant", tmp + "/pack"]))
        # A hostile header (one name 1,000 times): the findings are capped per code and the
        # rest counted in findings_omitted, which the schema must describe.
        entry = '"w":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}'
        header = ("{" + ",".join([entry] * 1000) + "}").encode()
        header += b" " * (-len(header) % 8)
        with open(tmp + "/dup.safetensors", "wb") as f:
            f.write(len(header).to_bytes(8, "little") + header)
        runs.append(("validation-report.schema.json", ["validate", "--json", "-", tmp + "/dup.safetensors"]))
        runs.append(("inspect.schema.json", ["inspect", "--json", tmp + "/dup.safetensors"]))
        # ckpt sign / verify-signature --json: a signed conversion (--sign-key), its bundle and
        # provenance verified (with --recompute), a failed verification, a bundle signed by sign.
        keys = fixtures / "oms/conformance/test/assets/keys/p384"
        trust = ["--public-key", str(keys / "signing-key-pub.pem")]
        subprocess.run([ckpt, "convert", "-q", "--sign-key", str(keys / "signing-key.pem"), str(fixtures / "oracle/dsv4-tiny"),
                        tmp + "/signed"], capture_output=True)
        runs.append(("signature-report.schema.json", ["sign", "-q", "--json", "-", "--private-key", str(keys / "signing-key.pem"),
                                                      "-o", tmp + "/tiny.sig", str(fixtures / "oracle/dsv4-tiny")]))
        runs.append(("signature-report.schema.json", ["verify-signature", "--json", "-", *trust, "--bundle", tmp + "/tiny.sig",
                                                      str(fixtures / "oracle/dsv4-tiny")]))
        runs.append(("signature-report.schema.json", ["verify-signature", "--json", "-", *trust, "--provenance",
                                                      tmp + "/signed/model.provenance", "--reference",
                                                      str(fixtures / "oracle/dsv4-tiny"), "--recompute", tmp + "/signed"]))
        runs.append(("signature-report.schema.json", ["verify-signature", "--json", "-", *trust, "--provenance",
                                                      tmp + "/signed/model.provenance", "--reference",
                                                      str(fixtures / "oracle/dsv4-edge"), tmp + "/signed"]))
        runs.append(("signature-report.schema.json", ["verify-signature", "--json", "-", *trust, "/nonexistent"]))
        # A conversion checked against its input's signature: the report lists input_sha256.
        runs.append(("convert-report.schema.json", ["convert", "-q", "--json", "-", "--expect-signature", tmp + "/tiny.sig",
                                                    *trust, str(fixtures / "oracle/dsv4-tiny"), tmp + "/expect"]))
        for schema_name, args in runs:
            failed += check_run(ckpt, schemas, schema_name, args)
    # Scale-out: partitions, --finalize (refused, then done) and validate --merge, in a scratch directory.
    with tempfile.TemporaryDirectory() as tmp:
        tiny, out = str(fixtures / "oracle/dsv4-tiny"), tmp + "/out"
        subprocess.run([ckpt, "convert", "-q", "--partition", "0/2", tiny, out], capture_output=True)
        refused = subprocess.run([ckpt, "convert", "--finalize", "--json", "-", tiny, out], capture_output=True, text=True).stdout
        subprocess.run([ckpt, "convert", "-q", "--partition", "1/2", tiny, out], capture_output=True)
        done = subprocess.run([ckpt, "convert", "--finalize", "--json", "-", tiny, out], capture_output=True, text=True).stdout
        for i in range(2):
            subprocess.run([ckpt, "validate", "-q", "--deep", "--partition", f"{i}/2", "--json", f"{tmp}/part-{i}.json", tiny],
                           capture_output=True)
        merged = subprocess.run([ckpt, "validate", "--merge", f"{tmp}/part-0.json", f"{tmp}/part-1.json", "--json", "-"],
                                capture_output=True, text=True).stdout
        for schema_name, what, text in [("convert-report.schema.json", "convert --finalize (refused)", refused),
                                        ("convert-report.schema.json", "convert --finalize", done),
                                        ("validation-report.schema.json", "validate --merge", merged)]:
            try:
                jsonschema.Draft202012Validator(schemas[schema_name]).validate(json.loads(text))
                print(f"ok   {schema_name}: {what}")
            except Exception as e:
                failed += 1
                print(f"FAIL {schema_name}: {what}: {str(e)[:400]}")
    # Golden manifests are checked in: each must validate too.
    for golden in sorted((source / "golden").glob("*.json")):
        try:
            jsonschema.Draft202012Validator(schemas["hash-manifest.schema.json"]).validate(json.loads(golden.read_text()))
            print(f"ok   hash-manifest.schema.json: {golden.name}")
        except Exception as e:
            failed += 1
            print(f"FAIL hash-manifest.schema.json: {golden.name}: {str(e)[:400]}")
    return 1 if failed else 0


def check_run(ckpt, schemas, schema_name, args) -> int:
    cmd = args if args[0].endswith("ckpt-gpu") else [ckpt, *args]
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    try:
        doc = json.loads(out)
        jsonschema.Draft202012Validator(schemas[schema_name]).validate(doc)
        print(f"ok   {schema_name}: ckpt {' '.join(args)}")
        return 0
    except Exception as e:  # a failure names the run and the first violation
        print(f"FAIL {schema_name}: ckpt {' '.join(args)}: {str(e)[:400]}")
        return 1

if __name__ == "__main__":
    sys.exit(main())
