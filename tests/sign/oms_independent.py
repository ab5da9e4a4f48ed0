#!/usr/bin/env python3
"""An independent OMS implementation (Python `cryptography` and the standard library, no
ckptkit code) against ckptkit, both ways:

1. a bundle made by `ckpt sign` (key method P-384 and P-521, certificate method) verifies
   here: media type, payload type, the ECDSA signature over the DSSE PAE with the key's
   hash, the statement and predicate types, every file of the model walked and hashed
   here, the same set of names with the same SHA-256, the root digest, the key hint; and
   the same check fails after one byte of the model changes (this verifier can fail);
2. a bundle signed here (the Python reference client's shape: indented JSON payload,
   keyid "", tlogEntries []) verifies with `ckpt verify-signature`, and is refused after
   one byte of the model changes (OMS_DIGEST_MISMATCH) or of the payload (OMS_SIGNATURE);
3. a signed conversion (`ckpt convert --sign-key`): OUT/model.sig verifies here as any OMS
   bundle, and OUT/model.provenance (SLSA provenance v1 in a DSSE envelope) verifies here:
   the signature over the PAE, OUT's and IN's files rehashed against the subject and the
   resolvedDependencies; after one byte of IN changes, it fails here.

Usage: oms_independent.py CKPT FIXTURES_DIR. Exit 0 when every check holds, 77 (skip)
when python3-cryptography is not installed.
"""
import base64
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

try:
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
except ImportError:
    print("SKIP: python3-cryptography is not installed (make deps installs it)")
    sys.exit(77)

DEFAULT_IGNORES = [".git", ".gitignore", ".gitattributes", ".github"]
PAYLOAD_TYPE = "application/vnd.in-toto+json"
HASHES = {"secp256r1": hashes.SHA256, "secp384r1": hashes.SHA384, "secp521r1": hashes.SHA512}


def pae(payload_type, payload):
    t = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def model_digests(model, ignore, bundle):
    """{name: sha256} of every regular file under model (or the file itself), by the spec's rules."""
    model = pathlib.Path(model)
    if model.is_file():
        return {model.name: hashlib.sha256(model.read_bytes()).hexdigest()}
    out = {}
    for root, dirs, files in os.walk(model):
        for f in files:
            p = pathlib.Path(root) / f
            rel = p.relative_to(model).as_posix()
            if p.resolve() == pathlib.Path(bundle).resolve():
                continue
            if any(rel == i or rel.startswith(i + "/") for i in ignore):
                continue
            assert not p.is_symlink(), rel
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def verify_here(bundle_path, model, public_key=None, ignore=()):
    """Raises on any failed rule; returns the number of files checked."""
    bundle = json.loads(pathlib.Path(bundle_path).read_text())
    assert bundle["mediaType"] == "application/vnd.dev.sigstore.bundle.v0.3+json", bundle["mediaType"]
    env = bundle["dsseEnvelope"]
    assert env["payloadType"] == PAYLOAD_TYPE
    payload = base64.b64decode(env["payload"], validate=True)
    [signature] = env["signatures"]
    material = bundle["verificationMaterial"]
    if "x509CertificateChain" in material:
        leaf = x509.load_der_x509_certificate(base64.b64decode(material["x509CertificateChain"]["certificates"][0]["rawBytes"]))
        key = leaf.public_key()
    else:
        key = serialization.load_pem_public_key(pathlib.Path(public_key).read_bytes())
        pem = key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        assert material["publicKey"]["hint"] == hashlib.sha256(pem).hexdigest(), "hint is not sha256(public PEM)"
    key.verify(base64.b64decode(signature["sig"], validate=True), pae(PAYLOAD_TYPE, payload),
               ec.ECDSA(HASHES[key.curve.name]()))
    statement = json.loads(payload)
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == "https://model_signing/signature/v1.0"
    predicate = statement["predicate"]
    ser = predicate["serialization"]
    assert ser["method"] == "files" and ser["hash_type"] == "sha256" and ser["allow_symlinks"] is False, ser
    names = [r["name"] for r in predicate["resources"]]
    assert names == sorted(names), "resources not sorted"
    signed = {r["name"]: r["digest"] for r in predicate["resources"]}
    assert all(r["algorithm"] == "sha256" for r in predicate["resources"])
    on_disk = model_digests(model, DEFAULT_IGNORES + list(ignore), bundle_path)
    assert signed == on_disk, f"signed {signed} != on disk {on_disk}"
    root = hashlib.sha256(b"".join(bytes.fromhex(signed[n]) for n in names)).hexdigest()
    [subject] = statement["subject"]
    assert subject["digest"]["sha256"] == root, "root digest"
    assert subject["name"] == pathlib.Path(model).name
    return len(signed)


def sign_here(model, private_key_pem, bundle_path, ignore=(), cert_chain=None):
    """An OMS bundle in the Python reference client's shape."""
    key = serialization.load_pem_private_key(pathlib.Path(private_key_pem).read_bytes(), None)
    digests = model_digests(model, DEFAULT_IGNORES + list(ignore), bundle_path)
    names = sorted(digests)
    statement = {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": pathlib.Path(model).name, "digest": {
            "sha256": hashlib.sha256(b"".join(bytes.fromhex(digests[n]) for n in names)).hexdigest()}}],
        "predicateType": "https://model_signing/signature/v1.0",
        "predicate": {"resources": [{"digest": digests[n], "algorithm": "sha256", "name": n} for n in names],
                      "serialization": {"method": "files", "ignore_paths": DEFAULT_IGNORES + list(ignore),
                                        "hash_type": "sha256", "allow_symlinks": False}},
    }
    payload = json.dumps(statement, indent=2).encode()
    sig = key.sign(pae(PAYLOAD_TYPE, payload), ec.ECDSA(HASHES[key.curve.name]()))
    if cert_chain:
        material = {"x509CertificateChain": {"certificates": [
            {"rawBytes": base64.b64encode(x509.load_pem_x509_certificate(pathlib.Path(c).read_bytes())
                                          .public_bytes(serialization.Encoding.DER)).decode()} for c in cert_chain]}}
    else:
        pem = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        material = {"publicKey": {"hint": hashlib.sha256(pem).hexdigest()}}
    material["tlogEntries"] = []
    bundle = {"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json", "verificationMaterial": material,
              "dsseEnvelope": {"payload": base64.b64encode(payload).decode(), "payloadType": PAYLOAD_TYPE,
                               "signatures": [{"sig": base64.b64encode(sig).decode(), "keyid": ""}]}}
    pathlib.Path(bundle_path).write_text(json.dumps(bundle, indent=2))


def flip_last_byte(path):
    data = bytearray(pathlib.Path(path).read_bytes())
    data[-1] ^= 1
    pathlib.Path(path).write_bytes(bytes(data))


ATTESTATION_EXCLUSIONS = [".ckptkit", "model.sig", "model.provenance"]


def verify_provenance_here(provenance, out, reference, public_key):
    """The provenance's DSSE signature over the PAE, its SLSA statement, OUT's and IN's
    digests recomputed here. Raises on any failed rule."""
    bundle = json.loads(pathlib.Path(provenance).read_text())
    env = bundle["dsseEnvelope"]
    assert env["payloadType"] == PAYLOAD_TYPE
    payload = base64.b64decode(env["payload"], validate=True)
    [signature] = env["signatures"]
    key = serialization.load_pem_public_key(pathlib.Path(public_key).read_bytes())
    key.verify(base64.b64decode(signature["sig"], validate=True), pae(PAYLOAD_TYPE, payload),
               ec.ECDSA(HASHES[key.curve.name]()))
    st = json.loads(payload)
    assert st["_type"] == "https://in-toto.io/Statement/v1"
    assert st["predicateType"] == "https://slsa.dev/provenance/v1"
    build = st["predicate"]["buildDefinition"]
    assert build["buildType"] == "https://ckptkit.dev/provenance/conversion/v1"

    def side(descriptors, model, prefix):
        files = {d["name"][len(prefix) + 1:]: d["digest"]["sha256"] for d in descriptors}
        on_disk = model_digests(model, DEFAULT_IGNORES + ATTESTATION_EXCLUSIONS, "/nonexistent")
        assert files == on_disk, f"recorded {files} != on disk {on_disk}"
        return hashlib.sha256(b"".join(bytes.fromhex(files[n]) for n in sorted(files))).hexdigest()

    root, *files = st["subject"]
    assert root["digest"]["sha256"] == side(files, out, root["name"]), "output root digest"
    deps = build["resolvedDependencies"]
    assert deps[0]["annotations"]["role"] == "input-root"
    in_files = [d for d in deps[1:] if "annotations" not in d]
    assert deps[0]["digest"]["sha256"] == side(in_files, reference, deps[0]["name"]), "input root digest"
    return build["externalParameters"]


def check_signed_conversion(ckpt, fixtures, keys, tmp, check):
    src, out = tmp / "conv-in", tmp / "conv-out"
    shutil.copytree(fixtures / "oracle/dsv4-tiny", src)
    pub = keys / "p384/signing-key-pub.pem"
    run = subprocess.run([ckpt, "convert", "-q", "--experts", "int8-shift", "--sign-key",
                          str(keys / "p384/signing-key.pem"), str(src), str(out)], capture_output=True, text=True)
    if run.returncode != 0:
        check("ckpt convert --sign-key", False, run.stderr)
        return
    try:
        n = verify_here(out / "model.sig", out, pub, ignore=[".ckptkit", "model.provenance"])
        check(f"a convert --sign-key OUT/model.sig verifies here: {n} files", n > 0)
    except Exception as e:
        check("a convert --sign-key OUT/model.sig verifies here", False, repr(e))
    try:
        params = verify_provenance_here(out / "model.provenance", out, src, pub)
        check("its OUT/model.provenance verifies here (signature, subject and input digests recomputed)",
              params["options"]["experts"] == "int8-shift", params)
    except Exception as e:
        check("its OUT/model.provenance verifies here", False, repr(e))
    flip_last_byte(src / "tokenizer.json")
    try:
        verify_provenance_here(out / "model.provenance", out, src, pub)
        check("this verifier refuses the provenance after one byte of IN changed", False, "it passed")
    except AssertionError:
        check("this verifier refuses the provenance after one byte of IN changed", True)


def main():
    ckpt, fixtures = sys.argv[1], pathlib.Path(sys.argv[2])
    keys = fixtures / "oms/conformance/test/assets/keys"
    failed = 0

    def check(label, ok, detail=""):
        nonlocal failed
        print(("ok   " if ok else "FAIL ") + label + ("" if ok else ": " + str(detail)[:600]))
        failed += not ok

    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        model = tmp / "model"
        shutil.copytree(fixtures / "oms/conformance/test/assets/models/multi-file", model)
        shutil.copytree(fixtures / "oms/conformance/test/assets/models/unicode-names", model / "unicode")
        (model / "shard.bin").write_bytes(os.urandom(3 << 20))
        (model / ".git").mkdir()
        (model / ".git/HEAD").write_text("ref: refs/heads/main\n")

        # 1. ckpt signs, this implementation verifies.
        signers = {
            "key P-384": (["--private-key", str(keys / "p384/signing-key.pem")], keys / "p384/signing-key-pub.pem"),
            "key P-521": (["--private-key", str(keys / "p521/signing-key.pem")], keys / "p521/signing-key-pub.pem"),
            "certificate": (["--private-key", str(keys / "certificate/signing-key.pem"), "--signing-cert",
                             str(keys / "certificate/signing-key-cert.pem"), "--cert-chain",
                             str(keys / "certificate/int-ca-cert.pem")], None),
        }
        for name, (args, pub) in signers.items():
            bundle = tmp / f"{name.replace(' ', '-')}.sig"
            run = subprocess.run([ckpt, "sign", "-q", "-o", str(bundle), *args, str(model)], capture_output=True, text=True)
            if run.returncode != 0:
                check(f"ckpt sign ({name})", False, run.stderr)
                continue
            try:
                n = verify_here(bundle, model, pub)
                check(f"a ckpt sign ({name}) bundle verifies here: {n} files, signature over the PAE, digests recomputed", n == 6)
            except Exception as e:
                check(f"a ckpt sign ({name}) bundle verifies here", False, repr(e))
        changed = tmp / "changed"
        shutil.copytree(model, changed)
        flip_last_byte(changed / "shard.bin")
        bundle = tmp / "changed.sig"
        run = subprocess.run([ckpt, "sign", "-q", "-o", str(bundle), "--private-key", str(keys / "p384/signing-key.pem"),
                              str(model)], capture_output=True, text=True)
        check("ckpt sign (key P-384) for the negative checks", run.returncode == 0, run.stderr)
        try:
            verify_here(bundle, changed, keys / "p384/signing-key-pub.pem")
            check("this verifier refuses a model with one byte changed", False, "it passed")
        except AssertionError:
            check("this verifier refuses a model with one byte changed", True)
        except Exception as e:
            check("this verifier refuses a model with one byte changed", False, repr(e))
        try:
            b = json.loads(bundle.read_text())
            payload = bytearray(base64.b64decode(b["dsseEnvelope"]["payload"]))
            payload[payload.index(b'"sha256"')] = ord("S")
            b["dsseEnvelope"]["payload"] = base64.b64encode(bytes(payload)).decode()
            bundle.write_text(json.dumps(b))
            verify_here(bundle, model, keys / "p384/signing-key-pub.pem")
            check("this verifier refuses a payload with one byte changed", False, "it passed")
        except InvalidSignature:
            check("this verifier refuses a payload with one byte changed", True)
        except Exception as e:
            check("this verifier refuses a payload with one byte changed", False, repr(e))

        # 2. This implementation signs, ckpt verifies.
        cases = {
            "key P-384": (keys / "p384/signing-key.pem", None, ["--public-key", str(keys / "p384/signing-key-pub.pem")]),
            "key P-521": (keys / "p521/signing-key.pem", None, ["--public-key", str(keys / "p521/signing-key-pub.pem")]),
            "certificate": (keys / "certificate/signing-key.pem",
                            [keys / "certificate/signing-key-cert.pem", keys / "certificate/int-ca-cert.pem"],
                            ["--cert-chain", str(keys / "certificate/ca-cert.pem")]),
        }
        for name, (key, chain, trust) in cases.items():
            bundle = tmp / f"py-{name.replace(' ', '-')}.sig"
            sign_here(model, key, bundle, cert_chain=chain)
            run = subprocess.run([ckpt, "verify-signature", "--bundle", str(bundle), *trust, str(model)],
                                 capture_output=True, text=True)
            check(f"a bundle signed here ({name}) verifies with ckpt", run.returncode == 0, run.stderr)
            run = subprocess.run([ckpt, "verify-signature", "--bundle", str(bundle), *trust, str(changed)],
                                 capture_output=True, text=True)
            check(f"... and ckpt refuses it after one byte of the model changed ({name})",
                  run.returncode == 1 and "OMS_DIGEST_MISMATCH shard.bin" in run.stderr, run.stderr)
            b = json.loads(bundle.read_text())
            payload = bytearray(base64.b64decode(b["dsseEnvelope"]["payload"]))
            payload[payload.index(b'"name"') + 1] = ord("N")
            b["dsseEnvelope"]["payload"] = base64.b64encode(bytes(payload)).decode()
            bundle.write_text(json.dumps(b))
            run = subprocess.run([ckpt, "verify-signature", "--bundle", str(bundle), *trust, str(model)],
                                 capture_output=True, text=True)
            check(f"... and refuses it after one byte of the payload changed ({name})",
                  run.returncode == 1 and "OMS_SIGNATURE" in run.stderr, run.stderr)
        # 3. A signed conversion (convert --sign-key): OUT's bundle and the provenance verify here.
        check_signed_conversion(ckpt, fixtures, keys, tmp, check)
    print(f"{'FAIL' if failed else 'ok'}: {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
