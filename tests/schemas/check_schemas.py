#!/usr/bin/env python3
"""Runs ckpt on fixtures and checks every --json output against schemas/*.schema.json.

Usage: check_schemas.py CKPT SOURCE_DIR FIXTURES_DIR. Exit 0 when every document validates."""
import json
import pathlib
import subprocess
import sys

import jsonschema


def main() -> int:
    ckpt, source, fixtures = sys.argv[1], pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
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
        ("inspect.schema.json", ["inspect", "--json", str(fixtures / "ggml/qwen3next-tiny.gguf")]),
        ("hash-manifest.schema.json", ["hash", str(fixtures / "oracle/dsv4-tiny")]),
        ("hash-manifest.schema.json", ["hash", "--algo", "both", "--dequant", str(fixtures / "ggml/qwen3next-tiny.gguf")]),
        ("hash-manifest.schema.json", ["hash", "--algo", "sha256", "--dequant", str(fixtures / "oracle/dsv4-edge")]),
        ("diff-report.schema.json", ["diff", "--json", "-", str(fixtures / "oracle/dsv4-tiny"), str(fixtures / "oracle/dsv4-tiny.qw-bf16")]),
        ("diff-report.schema.json", ["diff", "--json", "-", str(fixtures / "oracle/dsv4-edge.qw-bf16"), str(fixtures / "oracle/dsv4-tiny.qw-bf16")]),
        ("diff-report.schema.json", ["diff", "--json", "-", str(fixtures / "oracle/dsv3-tiny"), str(fixtures / "oracle/dsv3-tiny")]),
        ("diff-report.schema.json", ["diff", "--json", "-", str(fixtures / "oracle/dsv3-tiny"), "/nonexistent"]),
    ]
    failed = 0
    # An expert pack's manifest (written by repack-experts, not printed): check the file itself.
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([ckpt, "repack-experts", "-q", str(fixtures / "ggml/qwen3next-tiny.gguf"), tmp + "/pack"],
                       capture_output=True)
        try:
            manifest = json.loads(pathlib.Path(tmp + "/pack/manifest.json").read_text())
            jsonschema.Draft202012Validator(schemas["expert-pack-manifest.schema.json"]).validate(manifest)
            print("ok   expert-pack-manifest.schema.json: repack-experts qwen3next-tiny.gguf")
        except Exception as e:
            failed += 1
            print(f"FAIL expert-pack-manifest.schema.json: {str(e)[:400]}")
    # Golden manifests are checked in: each must validate too.
    for golden in sorted((source / "golden").glob("*.json")):
        try:
            jsonschema.Draft202012Validator(schemas["hash-manifest.schema.json"]).validate(json.loads(golden.read_text()))
            print(f"ok   hash-manifest.schema.json: {golden.name}")
        except Exception as e:
            failed += 1
            print(f"FAIL hash-manifest.schema.json: {golden.name}: {str(e)[:400]}")
    # An expert pack's hash manifest.
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([ckpt, "repack-experts", "-q", str(fixtures / "ggml/qwen3next-tiny.gguf"), tmp + "/pack"],
                       capture_output=True)
        runs.append(("hash-manifest.schema.json", ["hash", "--dequant", tmp + "/pack"]))
        results = [(name, args, subprocess.run([ckpt, *args], capture_output=True, text=True).stdout)
                   for name, args in runs]
    for schema_name, args, out in results:
        try:
            doc = json.loads(out)
            jsonschema.Draft202012Validator(schemas[schema_name]).validate(doc)
            print(f"ok   {schema_name}: ckpt {' '.join(args)}")
        except Exception as e:  # a failure names the run and the first violation
            failed += 1
            print(f"FAIL {schema_name}: ckpt {' '.join(args)}: {str(e)[:400]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
