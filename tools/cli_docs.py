#!/usr/bin/env python3
"""Man pages, bash completion and the docs check, all from the built binaries' --help.

    cli_docs.py man --version V --out DIR CKPT CKPT_GPU     ckpt.1, ckpt-SUB.1 per subcommand, ckpt-gpu.1
    cli_docs.py completion --out DIR CKPT CKPT_GPU          DIR/ckpt and DIR/ckpt-gpu (bash-completion)
    cli_docs.py check-docs --docs DIR CKPT CKPT_GPU         every option of `ckpt SUB --help` appears in
                                                            DIR/ckpt-SUB.md, of `ckpt --help` in DIR/ckpt.md,
                                                            of `ckpt-gpu [SUB] --help` in DIR/ckpt-gpu.md

The help text is CLI11's: a description, "Usage: ...", then sections ("Positionals:",
"Options:", "Subcommands:") of entries "  NAME[,NAME] [TYPE]   description", descriptions
continued on deeper-indented lines. Nothing here knows the options: a new flag shows up in
the man page and the completion at the next build, and the docs check names the page that
lacks it. Uses only the standard library; the output is deterministic (no dates).
"""
import argparse
import os
import pathlib
import re
import subprocess
import sys


class Entry:
    def __init__(self, head, desc):
        self.head = head            # "-o,--output TEXT:{a,b}" as printed
        self.desc = desc            # description, continuation lines joined with "\n"
        first = head.split(" ", 1)
        self.names = [n for n in first[0].split(",") if n]
        self.hint = first[1].strip() if len(first) > 1 else ""
        m = re.search(r":\{([^}]*)\}", self.hint)
        self.choices = [c for c in m.group(1).split(",") if c] if m else []

    @property
    def is_flag_like(self):
        return bool(self.names) and self.names[0].startswith("-")


class Help:
    """One `PROG [SUB] --help` output, parsed."""

    def __init__(self, text):
        self.text = text
        self.description = []
        self.usage = ""
        self.sections = {}   # "Options" -> [Entry]
        section = None
        current = None
        # CLI11's description column: where "-h,--help"'s description starts (30 by default).
        m = re.search(r"^(  -h,--help\s+)\S", text, re.M)
        self.column = len(m.group(1)) if m else 30
        for raw in text.splitlines():
            line = raw.rstrip()
            if not line:
                current = None
                continue
            if line.startswith("Usage:"):
                # CLI11 prints argv[0]; the pages name the program, not the build path.
                usage = line[len("Usage:"):].strip().split(" ", 1)
                self.usage = " ".join([os.path.basename(usage[0])] + usage[1:])
                section = None
                continue
            m = re.match(r"^(\S[^:]*):$", line) if not line.startswith(" ") else None
            if m and self.usage:
                section = m.group(1).strip("[] ")
                self.sections.setdefault(section, [])
                current = None
                continue
            if section is None:
                if not self.usage:
                    self.description.append(line.strip())
                continue
            if not line.startswith(" "):  # a footer or a group title: not part of an entry
                current = None
                continue
            if line.startswith("  ") and not line.startswith("   "):
                # The name is padded to the description column (a name that fills it is
                # followed by one space; a longer one puts the description on the next line).
                col = self.column
                if len(line) > col and line[col - 1] == " " and line[col] != " ":
                    head, desc = line[:col].strip(), line[col:].strip()
                else:
                    head, desc = line.strip(), ""
                current = Entry(head, desc)
                self.sections[section].append(current)
            elif current is not None:
                current.desc = (current.desc + "\n" + line.strip()).strip()

    def entries(self, section):
        return self.sections.get(section, [])

    def options(self):
        return [e for name, es in self.sections.items() if name != "Subcommands" for e in es if e.is_flag_like]

    def positionals(self):
        return self.entries("Positionals")

    def subcommands(self):
        return [(e.names[0], e.desc) for e in self.entries("Subcommands")]


def run_help(binary, *args):
    r = subprocess.run([binary, *args, "--help"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        sys.exit(f"cli_docs.py: `{binary} {' '.join(args)} --help` exited {r.returncode}: {r.stderr.strip()[:300]}")
    return Help(r.stdout)


def program(binary):
    """(name, top-level Help, [(sub, description, Help)])."""
    top = run_help(binary)
    subs = [(name, desc, run_help(binary, name)) for name, desc in top.subcommands()]
    return os.path.basename(binary), top, subs


# --- man pages ------------------------------------------------------------------------------
def roff(text):
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join(("\\&" + l) if l[:1] in (".", "'") else l for l in text.split("\n"))


def roff_entries(entries):
    out = []
    for e in entries:
        out.append(".TP")
        names = ", ".join(f"\\fB{roff(n)}\\fR" for n in e.names)
        out.append(names + (f" \\fI{roff(e.hint)}\\fR" if e.hint else ""))
        out.append(roff(e.desc) if e.desc else "")
    return out


def th(name, version):
    return [f'.TH {name.upper().replace("-", chr(92) + "-")} 1 "" "ckptkit {version}" "ckptkit manual"']


def man_pages(version, progs):
    pages = {}
    (ckpt_name, ckpt_top, ckpt_subs), (gpu_name, gpu_top, gpu_subs) = progs
    see_also = [f"{ckpt_name}(1)"] + [f"{ckpt_name}-{s}(1)" for s, _, _ in ckpt_subs] + [f"{gpu_name}(1)"]

    def footer(own):
        refs = [r for r in see_also if r != f"{own}(1)"]
        return [".SH SEE ALSO", ", ".join(f"\\fB{roff(r.split('(')[0])}\\fR(1)" for r in refs),
                ".PP", "The reference pages are in docs/ of the source tree (docs/README.md);",
                "the JSON Schemas of every \\-\\-json output are installed in",
                "\\fI/usr/share/ckptkit/schemas/\\fR (or \\fIPREFIX/share/ckptkit/schemas/\\fR)."]

    def options(h):
        out = []
        if h.positionals():
            out += [".SH ARGUMENTS"] + roff_entries(h.positionals())
        if h.options():
            out += [".SH OPTIONS"] + roff_entries(h.options())
        return out

    # ckpt(1)
    lines = th(ckpt_name, version)
    lines += [".SH NAME", f"{ckpt_name} \\- " + roff(" ".join(ckpt_top.description).split(": ", 1)[-1])]
    lines += [".SH SYNOPSIS", f"\\fB{ckpt_name}\\fR [\\fIOPTIONS\\fR] \\fISUBCOMMAND\\fR [\\fIARGS\\fR]"]
    lines += [".SH DESCRIPTION", roff(" ".join(ckpt_top.description))]
    lines += options(ckpt_top)
    lines += [".SH SUBCOMMANDS"]
    for s, desc, _ in ckpt_subs:
        lines += [".TP", f"\\fB{ckpt_name}\\-{roff(s)}\\fR(1)", roff(desc)]
    lines += footer(ckpt_name)
    pages[f"{ckpt_name}.1"] = lines

    # ckpt-SUB(1)
    for s, desc, h in ckpt_subs:
        page = f"{ckpt_name}-{s}"
        lines = th(page, version)
        lines += [".SH NAME", f"{roff(page)} \\- {roff(desc)}"]
        lines += [".SH SYNOPSIS", f"\\fB{roff(h.usage)}\\fR" if h.usage else f"\\fB{ckpt_name} {roff(s)}\\fR"]
        body = " ".join(h.description)
        if body and body != desc:
            lines += [".SH DESCRIPTION", roff(body)]
        lines += options(h)
        lines += [".PP", f"Global options (\\fB\\-\\-threads\\fR and others) are in \\fB{ckpt_name}\\fR(1)."]
        lines += footer(page)
        pages[f"{page}.1"] = lines

    # ckpt-gpu(1): every subcommand is a section of the one page
    lines = th(gpu_name, version)
    lines += [".SH NAME", f"{roff(gpu_name)} \\- " + roff(" ".join(gpu_top.description).split(": ", 1)[-1])]
    lines += [".SH SYNOPSIS"]
    for s, _, h in gpu_subs:
        lines += [f"\\fB{roff(h.usage)}\\fR" if h.usage else f"\\fB{roff(gpu_name)} {roff(s)}\\fR", ".br"]
    lines += [".SH DESCRIPTION", roff(" ".join(gpu_top.description))]
    lines += options(gpu_top)
    for s, desc, h in gpu_subs:
        lines += [f".SH {roff(gpu_name.upper())} {roff(s.upper())}", roff(desc)]
        if h.positionals():
            lines += [".SS Arguments"] + roff_entries(h.positionals())
        if h.options():
            lines += [".SS Options"] + roff_entries(h.options())
    lines += footer(gpu_name)
    pages[f"{gpu_name}.1"] = lines
    return pages


# --- bash completion ------------------------------------------------------------------------
def completion(name, top, subs):
    fn = "_" + re.sub(r"[^A-Za-z0-9_]", "_", name)
    sub_names = " ".join(s for s, _, _ in subs)
    global_opts = " ".join(n for e in top.options() for n in e.names)
    # Options of the program that may follow a subcommand (CLI11 fallthrough): not help/version.
    inherited = " ".join(n for e in top.options() for n in e.names if n not in ("-h", "--help", "--version"))
    out = [f"# bash completion for {name}; generated from `{name} --help` by tools/cli_docs.py. Do not edit.",
           f"{fn}() {{",
           "  local cur prev sub i",
           "  cur=${COMP_WORDS[COMP_CWORD]}",
           "  prev=${COMP_WORDS[COMP_CWORD-1]}",
           "  sub=",
           "  for ((i = 1; i < COMP_CWORD; i++)); do",
           "    case ${COMP_WORDS[i]} in",
           f"      {'|'.join(s for s, _, _ in subs) or '__none__'}) sub=${{COMP_WORDS[i]}}; break ;;",
           "    esac",
           "  done",
           "  local choices=",
           "  case $sub:$prev in"]
    for s, _, h in [("", "", top)] + subs:
        for e in h.options():
            if e.choices:
                pats = "|".join(f"{s}:{n}" for n in e.names)
                out.append(f"    {pats}) choices=\"{' '.join(e.choices)}\" ;;")
    out += ["  esac",
            "  if [[ -n $choices ]]; then COMPREPLY=($(compgen -W \"$choices\" -- \"$cur\")); return; fi",
            "  local words",
            "  case $sub in",
            f"    '') words=\"{sub_names} {global_opts}\" ;;"]
    for s, _, h in subs:
        opts = " ".join(n for e in h.options() for n in e.names)
        out.append(f"    {s}) words=\"{opts} {inherited}\" ;;")
    out += ["  esac",
            "  if [[ -z $sub || $cur == -* ]]; then",
            "    COMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))",
            "    [[ ${#COMPREPLY[@]} -gt 0 || -z $sub ]] && return",
            "  fi",
            "  COMPREPLY=($(compgen -f -- \"$cur\"))",
            "}",
            f"complete -o filenames -o bashdefault -F {fn} {name}",
            ""]
    return "\n".join(out)


# --- docs check ---------------------------------------------------------------------------
def check_docs(docs, progs):
    """[(page, option, where)] for every option missing from its page."""
    missing = []

    def need(page, entries, where):
        path = docs / page
        text = path.read_text() if path.exists() else None
        for e in entries:
            names = [n for n in e.names if n not in ("-h", "--help")]
            if not names:
                continue
            if text is None:
                missing.append((page, "/".join(names), where + " (the page does not exist)"))
                continue
            # Any of the option's spellings, as a whole word (not a prefix of a longer option).
            if not any(re.search(r"(?<![\w-])" + re.escape(n) + r"(?![\w-])", text) for n in names):
                missing.append((page, "/".join(names), where))

    (ckpt_name, ckpt_top, ckpt_subs), (gpu_name, gpu_top, gpu_subs) = progs
    need(f"{ckpt_name}.md", ckpt_top.options(), f"`{ckpt_name} --help`")
    for s, _, h in ckpt_subs:
        need(f"{ckpt_name}-{s}.md", h.options(), f"`{ckpt_name} {s} --help`")
    need(f"{gpu_name}.md", gpu_top.options(), f"`{gpu_name} --help`")
    for s, _, h in gpu_subs:
        need(f"{gpu_name}.md", h.options(), f"`{gpu_name} {s} --help`")
    return missing


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=["man", "completion", "check-docs"])
    ap.add_argument("ckpt")
    ap.add_argument("ckpt_gpu")
    ap.add_argument("--out")
    ap.add_argument("--docs")
    ap.add_argument("--version", default="")
    a = ap.parse_args()
    progs = [program(a.ckpt), program(a.ckpt_gpu)]
    if progs[0][0] != "ckpt" or not progs[0][2]:
        sys.exit(f"cli_docs.py: {a.ckpt} does not look like ckpt (no subcommands in its --help)")

    if a.mode == "check-docs":
        docs = pathlib.Path(a.docs)
        missing = check_docs(docs, progs)
        for page, opt, where in missing:
            print(f"FAIL docs/{page}: {opt} (from {where}) is not mentioned; add a line describing it")
        n = sum(len(h.options()) for _, top, subs in progs for h in [top] + [x[2] for x in subs])
        print(f"{'FAIL' if missing else 'ok'}: {n} options checked, {len(missing)} missing from docs/")
        return 1 if missing else 0

    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.mode == "man":
        pages = man_pages(a.version, progs)
        for old in out.glob("*.1"):
            if old.name not in pages:
                old.unlink()
        for name, lines in pages.items():
            (out / name).write_text("\n".join(lines) + "\n")
    else:
        for name, top, subs in progs:
            (out / name).write_text(completion(name, top, subs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
