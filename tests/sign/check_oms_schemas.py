#!/usr/bin/env python3
"""Bundles written by `ckpt sign` validate against the OMS v1.0 JSON Schemas (spec §3.1:
bundle -> envelope -> decoded payload: statement -> predicate), for the key method on
P-256, P-384 and P-521 keys and the certificate method, on several models.

First the check proves it can fail: the spec's own test vectors (valid/ must pass,
invalid/ must fail the bundle schema, invalid-payload/ the statement schema).

Usage: check_oms_schemas.py CKPT FIXTURES_DIR. Exit 0 when every check holds.
"""
import base64
import json
import pathlib
import subprocess
import sys
import tempfile

import jsonschema
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec


def load_schemas(spec):
    schemas = {p.name.split(".")[0]: json.loads(p.read_text()) for p in (spec / "schemas/v1.0").glob("*.schema.json")}
    try:  # jsonschema >= 4.18 resolves "$ref" by "$id" through a registry
        import referencing
        import referencing.jsonschema
        registry = referencing.Registry().with_resources(
            (s["$id"], referencing.Resource.from_contents(s, default_specification=referencing.jsonschema.DRAFT202012))
            for s in schemas.values())
        return {name: jsonschema.Draft202012Validator(s, registry=registry) for name, s in schemas.items()}
    except ImportError:  # Debian 12's jsonschema 4.10: a RefResolver with every schema in its store
        store = {s["$id"]: s for s in schemas.values()}
        return {name: jsonschema.Draft202012Validator(s, resolver=jsonschema.RefResolver.from_schema(s, store=store))
                for name, s in schemas.items()}


def errors(validators, bundle):
    """Schema violations of a bundle and of its decoded statement (empty: valid)."""
    found = [f"bundle: {e.message[:200]}" for e in validators["bundle"].iter_errors(bundle)]
    try:
        payload = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"], validate=True))
    except Exception as e:  # no envelope, bad Base64, not JSON: the bundle schema said so
        return found or [f"payload: {e}"]
    found += [f"statement: {e.message[:200]}" for e in validators["statement"].iter_errors(payload)]
    return found


def main():
    ckpt, fixtures = sys.argv[1], pathlib.Path(sys.argv[2])
    spec, suite = fixtures / "oms/spec", fixtures / "oms/conformance/test/assets"
    validators = load_schemas(spec)
    failed = 0

    def check(label, ok, detail=""):
        nonlocal failed
        print(("ok   " if ok else "FAIL ") + label + ("" if ok else ": " + detail))
        failed += not ok

    vectors = spec / "test-vectors/v1.0"
    for p in sorted((vectors / "valid").glob("*.json")):
        e = errors(validators, json.loads(p.read_text()))
        check(f"test vector valid/{p.name} validates", not e, "; ".join(e))
    for p in sorted((vectors / "invalid").glob("*.json")):
        try:
            e = [x for x in errors(validators, json.loads(p.read_text())) if x.startswith("bundle")]
        except json.JSONDecodeError as x:  # empty.bundle.json: not even JSON
            e = [str(x)]
        check(f"test vector invalid/{p.name} is rejected by the bundle schema", bool(e))
    for p in sorted((vectors / "invalid-payload").glob("*.json")):
        e = [x for x in errors(validators, json.loads(p.read_text())) if x.startswith("statement")]
        check(f"test vector invalid-payload/{p.name} is rejected by the statement schema", bool(e))

    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        p256 = tmp / "p256.pem"
        p256.write_bytes(ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        keys = suite / "keys"
        signers = {
            "key P-256": ["--private-key", str(p256)],
            "key P-384": ["--private-key", str(keys / "p384/signing-key.pem")],
            "key P-521": ["--private-key", str(keys / "p521/signing-key.pem")],
            "certificate": ["--private-key", str(keys / "certificate/signing-key.pem"), "--signing-cert",
                            str(keys / "certificate/signing-key-cert.pem"), "--cert-chain",
                            str(keys / "certificate/int-ca-cert.pem")],
        }
        models = ["simple", "multi-file", "single-file/model.bin", "unicode-names", "with-git-dir"]
        for signer, args in signers.items():
            for model in models:
                out = tmp / "b.sig"
                run = subprocess.run([ckpt, "sign", "-q", "-o", str(out), *args, str(suite / "models" / model)],
                                     capture_output=True, text=True)
                if run.returncode != 0:
                    check(f"ckpt sign ({signer}) {model}", False, run.stderr.strip())
                    continue
                e = errors(validators, json.loads(out.read_text()))
                check(f"ckpt sign ({signer}) {model}: bundle and statement validate", not e, "; ".join(e))
        # A signed conversion's OUT/model.sig (convert --sign-key) is an ordinary OMS bundle;
        # its provenance is a Sigstore bundle too (its payload is SLSA, not the OMS statement).
        conv = tmp / "conv"
        run = subprocess.run([ckpt, "convert", "-q", "--sign-key", str(keys / "p384/signing-key.pem"),
                              str(fixtures / "oracle/dsv4-tiny"), str(conv)], capture_output=True, text=True)
        check("ckpt convert --sign-key", run.returncode == 0, run.stderr.strip())
        if run.returncode == 0:
            e = errors(validators, json.loads((conv / "model.sig").read_text()))
            check("convert --sign-key OUT/model.sig: bundle and statement validate", not e, "; ".join(e))
            e = [x for x in errors(validators, json.loads((conv / "model.provenance").read_text())) if x.startswith("bundle")]
            check("convert --sign-key OUT/model.provenance: the bundle validates", not e, "; ".join(e))
    print(f"{'FAIL' if failed else 'ok'}: {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
