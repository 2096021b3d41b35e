#!/usr/bin/env python3
"""Lists Rust functions by length (lines from `fn` to its closing brace).

Usage: scripts/fn_lengths.py [--top N] [--over L] DIR...
A rough lexer: skips comments, strings and char literals when matching braces.
Tests (files under tests/ and `mod tests`) are included only with --tests.
"""
import os, re, sys

FN = re.compile(r'^\s*(pub(\([a-z]+\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?fn\s+([A-Za-z_][A-Za-z0-9_]*)')

def strip(line, state):
    """Returns the line with comments/strings blanked; state carries block comments and raw strings."""
    out = []
    i = 0
    while i < len(line):
        if state['block']:
            j = line.find('*/', i)
            if j < 0:
                return ''.join(out)
            state['block'] = False
            i = j + 2
            continue
        if state['str']:
            c = line[i]
            if c == '\\':
                i += 2
                continue
            if c == '"':
                state['str'] = False
            i += 1
            continue
        c = line[i]
        if line.startswith('//', i):
            break
        if line.startswith('/*', i):
            state['block'] = True
            i += 2
            continue
        m = re.match(r'r(#*)"', line[i:])
        if m and (i == 0 or not (line[i-1].isalnum() or line[i-1] == '_')):
            end = '"' + m.group(1)
            j = line.find(end, i + len(m.group(0)))
            if j < 0:
                return ''.join(out)
            i = j + len(end)
            continue
        if c == '"':
            state['str'] = True
            i += 1
            continue
        if c == "'":
            m = re.match(r"'(\\.|[^\\'])'", line[i:]) or re.match(r"'\\u\{[0-9a-fA-F]+\}'", line[i:])
            if m:
                i += len(m.group(0))
                continue
        out.append(c)
        i += 1
    return ''.join(out)

def functions(path):
    with open(path, encoding='utf-8') as f:
        lines = f.readlines()
    state = {'block': False, 'str': False}
    clean = [strip(l, state) for l in lines]
    in_tests_from = None
    res = []
    for n, l in enumerate(clean):
        if re.match(r'^\s*mod tests\b', l) and in_tests_from is None:
            in_tests_from = n
        m = FN.match(l)
        if not m:
            continue
        depth = 0
        opened = False
        for k in range(n, len(clean)):
            for ch in clean[k]:
                if ch == '{':
                    depth += 1
                    opened = True
                elif ch == '}':
                    depth -= 1
                elif ch == ';' and not opened and depth == 0:
                    break
            else:
                if opened and depth == 0:
                    res.append((k - n + 1, path, n + 1, m.group(6), in_tests_from is not None and n > in_tests_from))
                    break
                continue
            break
    return res

def main():
    args = sys.argv[1:]
    top, over, tests = 20, None, False
    dirs = []
    while args:
        a = args.pop(0)
        if a == '--top': top = int(args.pop(0))
        elif a == '--over': over = int(args.pop(0))
        elif a == '--tests': tests = True
        else: dirs.append(a)
    allf = []
    for d in dirs:
        for root, _, files in os.walk(d):
            if '/target' in root or (not tests and ('/tests' in root or root.endswith('tests'))):
                continue
            for fn in files:
                if fn.endswith('.rs'):
                    allf.extend(functions(os.path.join(root, fn)))
    if not tests:
        allf = [x for x in allf if not x[4]]
    allf.sort(key=lambda x: -x[0])
    if over is not None:
        allf = [x for x in allf if x[0] > over]
    else:
        allf = allf[:top]
    for ln, p, line, name, _ in allf:
        print(f'{ln:5} {p}:{line} {name}')

main()
