#!/usr/bin/env python3
"""Rewrites a CUDA source (.cu or .cuh) into host C++ for the CPU emulator (tests/cuda_emul), changing
only what host C++ cannot express, each into a call of the emulator (emulator.h):
  kernel<<<grid, block, bytes, stream>>>(args);  ->  ::tandem_emul::launch(LaunchConfig(...), kernel, args);
  extern __shared__ __align__(16) T name[];       ->  T* const name = static_cast<T*>(dynamic_shared(16));
  asm volatile("ptx" : "=r"(x) : "r"(y));         ->  ::tandem_emul::ptx_asm("ptx", {asm_out("=r", x)}, {asm_in("r", y)});
  __CUDA_ARCH__                                   ->  TANDEM_EMUL_CUDA_ARCH (the shadow cuda_runtime.h: 800)
Everything else is copied as is, and line numbers are kept (#line and padding), so that compiler
and sanitizer messages point at the real source. Fails loudly when a pattern named by --require is
absent, or when any construct of these kinds is left that the rewrite did not understand.

usage: transform_cuda.py INPUT OUTPUT [--require launch|shared|asm|arch ...]
"""
import argparse
import re
import sys


def fail(path, message):
    sys.exit(f"transform_cuda.py: {path}: {message}")


def skip_string(text, i):
    """Index just past the string or character literal that starts at text[i]."""
    quote = text[i]
    i += 1
    while text[i] != quote:
        i += 2 if text[i] == "\\" else 1
    return i + 1


def matching(text, i, open_char, close_char):
    """Index of the bracket closing the one at text[i], skipping literals and nested brackets."""
    depth = 0
    while i < len(text):
        c = text[i]
        if c in "\"'":
            i = skip_string(text, i)
            continue
        if c == open_char:
            depth += 1
        elif c == close_char:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise ValueError(f"no closing {close_char}")


def split_top(text, separator):
    """Splits at `separator` characters outside literals and brackets."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        c = text[i]
        if c in "\"'":
            i = skip_string(text, i)
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == separator and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return parts


def padded(replacement, original):
    """The replacement, padded with newlines to span as many lines as the original."""
    missing = original.count("\n") - replacement.count("\n")
    if missing < 0:
        raise ValueError(f"a replacement spans more lines than {original!r}")
    return replacement + "\n" * missing


def rewrite_asm(path, text):
    out, count, pos = [], 0, 0
    pattern = re.compile(r"\basm\s*(?:volatile\s*)?\(")
    while (m := pattern.search(text, pos)) is not None:
        open_paren = m.end() - 1
        close = matching(text, open_paren, "(", ")")
        end = close + 1
        while text[end] in " \t":
            end += 1
        if text[end] != ";":
            fail(path, f"asm statement not followed by ';' near: {text[m.start():end + 1]!r}")
        sections = split_top(text[open_paren + 1:close], ":")
        if len(sections) > 4:
            fail(path, "asm with more than template : outputs : inputs : clobbers")
        template = sections[0].strip()
        if not re.fullmatch(r'("([^"\\]|\\.)*"\s*)+', template):
            fail(path, f"asm template is not string literals: {template!r}")
        operand_lists = []
        for kind, section in zip(("out", "in"), sections[1:3] + [""] * (3 - len(sections))):
            operands = []
            for operand in split_top(section, ","):
                operand = operand.strip()
                if not operand:
                    continue
                om = re.fullmatch(r'"([^"]*)"\s*\((.*)\)', operand, re.S)
                if om is None:
                    fail(path, f"asm operand is not \"constraint\"(expression): {operand!r}")
                operands.append(f'::tandem_emul::asm_{kind}("{om.group(1)}", {om.group(2).strip()})')
            operand_lists.append("{" + ", ".join(operands) + "}")
        if len(sections) == 4 and any(c.strip() not in ('"memory"', "") for c in split_top(sections[3], ",")):
            fail(path, f"asm clobbers other than \"memory\": {sections[3]!r}")
        call = f"::tandem_emul::ptx_asm({template}, {operand_lists[0]}, {operand_lists[1]});"
        out.append(text[pos:m.start()])
        out.append(padded(call, text[m.start():end + 1]))
        pos = end + 1
        count += 1
    out.append(text[pos:])
    return "".join(out), count


def rewrite_launches(path, text):
    out, count, pos = [], 0, 0
    while (start := text.find("<<<", pos)) >= 0:
        # The kernel expression before <<<: a name, optionally with template arguments.
        k = start
        while text[k - 1] in " \t":
            k -= 1
        if text[k - 1] == ">":
            depth = 0
            while True:
                k -= 1
                if text[k] == ">":
                    depth += 1
                elif text[k] == "<":
                    depth -= 1
                    if depth == 0:
                        break
        name = re.search(r"[A-Za-z_][\w:]*$", text[:k])
        if name is None:
            fail(path, f"no kernel name before <<< at offset {start}")
        kernel = text[name.start():start].strip()
        config_end = text.find(">>>", start)
        if config_end < 0:
            fail(path, "<<< without >>>")
        config = text[start + 3:config_end].strip()
        open_paren = config_end + 3
        while text[open_paren] in " \t\n":
            open_paren += 1
        if text[open_paren] != "(":
            fail(path, f"no argument list after {kernel}<<<...>>>")
        close = matching(text, open_paren, "(", ")")
        end = close + 1
        while text[end] in " \t":
            end += 1
        if text[end] != ";":
            fail(path, f"kernel launch of {kernel} not followed by ';'")
        args = text[open_paren + 1:close].strip()
        call = f"::tandem_emul::launch(::tandem_emul::LaunchConfig({config}), {kernel}{', ' + args if args else ''});"
        out.append(text[pos:name.start()])
        out.append(padded(call, text[name.start():end + 1]))
        pos = end + 1
        count += 1
    out.append(text[pos:])
    return "".join(out), count


def rewrite_shared(text):
    pattern = re.compile(
        r"extern\s+__shared__\s+(?:__align__\s*\(\s*(\d+)\s*\)\s*)?([A-Za-z_][\w:\s]*?)\s+([A-Za-z_]\w*)\s*\[\s*\]\s*;")

    def replace(m):
        align = m.group(1) or "16"
        type_name = " ".join(m.group(2).split())
        return padded(f"{type_name}* const {m.group(3)} = static_cast<{type_name}*>"
                      f"(::tandem_emul::dynamic_shared({align}));", m.group(0))

    return pattern.subn(replace, text)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("--require", action="append", default=[], choices=["launch", "shared", "asm", "arch"])
    options = parser.parse_args()
    path = options.input
    with open(path, encoding="utf-8") as f:
        text = f.read()
    counts = {}
    text, counts["asm"] = rewrite_asm(path, text)
    text, counts["launch"] = rewrite_launches(path, text)
    text, counts["shared"] = rewrite_shared(text)
    text, counts["arch"] = re.subn(r"\b__CUDA_ARCH__\b", "TANDEM_EMUL_CUDA_ARCH", text)
    for kind in options.require:
        if counts[kind] == 0:
            fail(path, f"expected at least one {kind} construct to rewrite, found none (did the source change?)")
    for leftover, what in ((r"<<<", "kernel launch"), (r"\basm\s*(volatile\s*)?\(", "asm statement"),
                           (r"extern\s+__shared__", "extern __shared__ declaration"), (r"__CUDA_ARCH__", "__CUDA_ARCH__")):
        if re.search(leftover, text):
            fail(path, f"a {what} the rewrite did not understand is left")
    with open(options.output, "w", encoding="utf-8") as f:
        f.write(f'// Generated by tests/cuda_emul/transform_cuda.py from {path}: do not edit.\n#line 1 "{path}"\n')
        f.write(text)


if __name__ == "__main__":
    main()
