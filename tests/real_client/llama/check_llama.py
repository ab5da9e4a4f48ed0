#!/usr/bin/env python3
"""llama.cpp as the GGUF real client and reference (CTest real_client_llama; README.md).

Usage: check_llama.py --ckpt CKPT --verdicts VERDICTS_BIN --exactness EXACTNESS_BIN --fixtures DIR

1. Installs llama.cpp's npm package outside the clone (install.sh; kept when already there).
2. Differential validation over a corpus: every *.gguf under the fixtures, the GGUFs ckptkit
   writes (`ckpt repack-experts qwen3next-tiny.gguf` with --a-log fix and keep: dense.gguf)
   and the hostile corpus of make_hostile.py. ckptkit's verdict is `ckpt validate --deep`
   (exit 0 accepts, 1 rejects); llama.cpp's is its parser (gguf_init_from_file as the model
   loader calls it), its loader (a vocab-only model load: bounds, vocabulary types; a file
   that is not a model it knows, "key not found" or "unknown model architecture", is no
   format verdict) and its data check (ggml_validate_row_data): it accepts when all three do.
   A disagreement fails unless known_disagreements.json lists it with a judgement; a listed
   file that now agrees fails too (the list must stay true). Every file is printed with both
   verdicts.
3. Full-read mode (llama-gguf-hash's gguf_init_from_file(no_alloc = false)): every file
   ckptkit writes must load; on every file llama.cpp otherwise accepts, full read refuses
   exactly when `ckpt validate` warned GGUF_LAST_TENSOR_UNPADDED.
4. Exactness: the EXACTNESS_BIN run against the package's libggml-base.so (ggml's to_float
   vs ckptkit's scalar, AVX2, AVX-512 paths and the GPU kernels' emulation, every type).
Exit 0 pass, 1 failure, 2 usage, 77 skipped (npm cannot reach its registry, and
CKPT_REQUIRE_LLAMA is not 1).
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
SKIP = 77
# Loader errors that say the file is no model llama.cpp knows (not a format verdict).
NOT_A_MODEL = ("key not found in model", "unknown model architecture")


def install():
    r = subprocess.run(["bash", str(HERE / "install.sh")], capture_output=True, text=True)
    print(r.stdout.strip())
    if r.returncode == SKIP:
        print("SKIP: llama.cpp (npm node-llama-cpp@3.22.1) could not be installed: npm cannot reach its registry")
        sys.exit(SKIP)
    if r.returncode != 0:
        print(r.stderr.strip())
        print("FAIL: installing llama.cpp from npm failed")
        sys.exit(1)
    llama_dir = pathlib.Path(os.environ.get("CKPT_LLAMA_DIR", pathlib.Path.home() / ".cache/ckptkit/llama-3.22.1"))
    return llama_dir / "node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"


def ckpt_verdict(ckpt, path):
    r = subprocess.run([ckpt, "validate", "--deep", "--json", "-", str(path)], capture_output=True)
    if r.returncode not in (0, 1):
        return {"accepts": None, "why": f"exit {r.returncode}: {r.stderr.decode(errors='replace').strip()[:200]}",
                "codes": []}
    note = ""
    try:
        text = r.stdout.decode()
    except UnicodeDecodeError as e:  # the json_schemas test owns this rule; said here, not judged
        note = f" [NOTE: --json output is not valid UTF-8 at byte {e.start}]"
        text = r.stdout.decode(errors="replace")
    try:
        findings = json.loads(text).get("findings", [])
    except json.JSONDecodeError:
        return {"accepts": None, "why": "--json output is not JSON", "codes": []}
    errors = [f["code"] for f in findings if f["severity"] == "error"]
    warnings = [f["code"] for f in findings if f["severity"] == "warning"]
    why = ",".join(dict.fromkeys(errors)) if errors else ("warnings " + ",".join(dict.fromkeys(warnings)) if warnings else "")
    return {"accepts": r.returncode == 0, "why": why + note, "codes": errors + warnings}


def llama_ggml_verdicts(binary, lib, path):
    try:
        r = subprocess.run([binary, str(lib), str(path)], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return {"parser": "hung (120 s)", "full_read": "hung", "data": "hung"}
    if r.returncode != 0 or not r.stdout.strip():
        crash = f"crashed (exit {r.returncode})"
        return {"parser": crash, "full_read": crash, "data": crash}
    verdicts = json.loads(r.stdout.strip().splitlines()[-1])
    # ggml_validate_row_data says why on stderr (fprintf, not ggml's logger).
    why = [l.strip() for l in r.stderr.splitlines() if l.startswith("ggml_validate_row_data:")]
    if verdicts["data"] != "ok" and why:
        verdicts["data"] = verdicts["data"].replace("ggml_validate_row_data returned false", why[0])
    return verdicts


def llama_loader_verdicts(bins, paths):
    r = subprocess.run(["node", str(HERE / "loader.cjs"), str(bins)] + [str(p) for p in paths],
                       capture_output=True, text=True, timeout=600)
    out = {}
    for line in r.stdout.splitlines():
        if line.startswith("{"):
            v = json.loads(line)
            out[v["file"]] = v
    if r.returncode != 0 or len(out) != len(paths):
        print(f"loader run ended with exit {r.returncode} after {len(out)} of {len(paths)} files: {r.stderr.strip()[:300]}")
    return out


def combine(ggml, loader):
    """llama.cpp's verdict: (accepts, why)."""
    if ggml["parser"] != "ok":
        return False, "parser: " + ggml["parser"]
    if loader is None:
        return False, "loader: no answer (crashed)"
    err = loader["error"]
    if not loader["loads"] and not any(s in err for s in NOT_A_MODEL):
        return False, "loader: " + err.split("error loading model: ")[-1]
    if ggml["data"] != "ok":
        return False, "data: " + ggml["data"]
    note = "loads" if loader["loads"] else "format ok (" + err.split("error loading model: ")[-1][:60] + ")"
    return True, note


def build_corpus(args, work):
    corpus = []  # (label, path, kind)
    fixtures = pathlib.Path(args.fixtures)
    for p in sorted(fixtures.rglob("*.gguf")):
        corpus.append((str(p.relative_to(fixtures)), p, "fixture"))
    source = fixtures / "ggml/qwen3next-tiny.gguf"
    for mode in ("fix", "keep"):
        out = work / f"repack-{mode}"
        r = subprocess.run([args.ckpt, "repack-experts", str(source), str(out), "--a-log", mode, "-q"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(f"FAIL: ckpt repack-experts --a-log {mode} exited {r.returncode}: {r.stderr.strip()}")
            sys.exit(1)
        written = sorted(out.rglob("*.gguf"))
        if not written:
            print(f"FAIL: ckpt repack-experts --a-log {mode} wrote no GGUF")
            sys.exit(1)
        for p in written:
            corpus.append((f"written/a-log-{mode}/{p.relative_to(out)}", p, "written"))
    hostile = work / "hostile"
    subprocess.run([sys.executable, str(HERE / "make_hostile.py"), str(hostile)], check=True, capture_output=True)
    for p in sorted(hostile.glob("*.gguf")):
        corpus.append((f"hostile/{p.name}", p, "hostile"))
    return corpus


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--verdicts", required=True)
    ap.add_argument("--exactness", required=True)
    ap.add_argument("--fixtures", required=True)
    args = ap.parse_args()
    bins = install()
    lib = bins / "libggml-base.so"
    known = {k["file"]: k for k in json.loads((HERE / "known_disagreements.json").read_text())["disagreements"]}
    failures = []
    with tempfile.TemporaryDirectory(prefix="ckpt-llama-") as tmp:
        work = pathlib.Path(tmp)
        corpus = build_corpus(args, work)
        loader = llama_loader_verdicts(bins, [p for _, p, _ in corpus])
        n_hostile = sum(1 for c in corpus if c[2] == "hostile")
        print(f"\n== differential validation: {len(corpus)} GGUFs ({n_hostile} hostile), "
              "ckpt validate --deep vs llama.cpp (parser, vocab-only loader, ggml_validate_row_data)")
        print(f"{'file':<52} {'ckptkit':<8} {'llama.cpp':<9} {'full read':<9} verdicts")
        agree = 0
        for label, path, kind in corpus:
            ck = ckpt_verdict(args.ckpt, path)
            gg = llama_ggml_verdicts(args.verdicts, lib, path)
            ll_ok, ll_why = combine(gg, loader.get(str(path)))
            ck_s = "error" if ck["accepts"] is None else ("accept" if ck["accepts"] else "reject")
            ll_s = "accept" if ll_ok else "reject"
            fr = "ok" if gg["full_read"] == "ok" else ("-" if gg["full_read"].startswith("skipped") else "REFUSES")
            status = ""
            if ck["accepts"] is None:
                failures.append(f"{label}: ckpt validate failed to run: {ck['why']}")
                status = "  <-- ckpt error"
            elif ck["accepts"] == ll_ok:
                agree += 1
                if label in known:
                    failures.append(f"{label}: listed in known_disagreements.json but now both {ck_s}")
                    status = "  <-- LISTED BUT NOW AGREES"
            elif label in known and known[label]["ckptkit"] == ck_s and known[label]["llama"] == ll_s:
                status = f"  <-- known disagreement (right: {known[label]['right']})"
            else:
                failures.append(f"{label}: ckptkit {ck_s} ({ck['why']}), llama.cpp {ll_s} ({ll_why}): not in known_disagreements.json")
                status = "  <-- UNEXPLAINED DISAGREEMENT"
            # Full read: written files must load; elsewhere it refuses iff ckptkit warned.
            if kind == "written" and fr != "ok":
                failures.append(f"{label}: written by ckptkit but llama.cpp's full read says {gg['full_read']}")
                status += "  <-- written file refused by full read"
            if ll_ok and (fr == "REFUSES") != ("GGUF_LAST_TENSOR_UNPADDED" in ck["codes"]):
                failures.append(f"{label}: full read {gg['full_read']} but ckpt validate "
                                f"{'warned' if 'GGUF_LAST_TENSOR_UNPADDED' in ck['codes'] else 'did not warn'} GGUF_LAST_TENSOR_UNPADDED")
                status += "  <-- full-read warning mismatch"
            print(f"{label:<52} {ck_s:<8} {ll_s:<9} {fr:<9} ckptkit: {ck['why'] or 'clean'} | llama.cpp: {ll_why}{status}")
        print(f"{agree} of {len(corpus)} agree; {len(corpus) - agree} disagree "
              f"({sum(1 for c in corpus if c[0] in known)} listed in known_disagreements.json)")
        if len(corpus) < 60 or 2 * n_hostile < len(corpus):
            failures.append(f"corpus too small: {len(corpus)} files, {n_hostile} hostile (need >= 60, half hostile)")
        missing = sorted(set(known) - {c[0] for c in corpus})
        for m in missing:
            failures.append(f"{m}: listed in known_disagreements.json but not in the corpus")

    print("\n== exactness: ggml's to_float vs ckptkit (scalar, AVX2, AVX-512, GPU emulation)")
    r = subprocess.run([args.exactness, str(lib)], capture_output=True, text=True)
    print(r.stdout.rstrip())
    if r.returncode != 0:
        print(r.stderr.rstrip())
        failures.append(f"exactness: exit {r.returncode}")

    if failures:
        print("\nFAIL:")
        for f in failures:
            print("  " + f)
        return 1
    print("\nPASS: no unexplained disagreement, every written GGUF loads in full-read mode, ggml's values bit for bit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
