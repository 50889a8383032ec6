#!/usr/bin/env python3
"""Checks the header's layering: each implementation section (the ">>name" markers, in file order from >>base)
calls only functions defined in itself or in a section before it. A section reaches one after it only through a
callback it was given (a function pointer, which this check does not follow).
  python3 tools/layering.py [tinyrec.h]   lists every call to a later section; exit 1 when there is one
  python3 tools/layering.py --self-test   the check on a copy where >>base calls into the last section must fail
"""
import re
import sys

SECTION = re.compile(r'^/\* >>([a-z0-9]+(?:-[a-z0-9]+)*)')
DEFINITION = re.compile(r'^(?:TRDEF|TR__FN|static)\b[^;{=]*?\b(tr_{1,2}[A-Za-z0-9_]+)\s*\(')
PROTOTYPE = re.compile(r'^(?:TRDEF|TR__FN)\b.*\)\s*;\s*(?:/\*.*\*/)?\s*$')
CALL = re.compile(r'\b(tr_{1,2}[A-Za-z0-9_]+)\s*\(')


def section_name(raw):
    if raw.startswith('opencl') or raw.startswith('cl-'):
        return 'opencl'
    return raw


def analyse(text):
    lines = text.split('\n')
    first = next(i for i, l in enumerate(lines) if l.startswith('/* >>base'))
    marks = []
    for i, l in enumerate(lines[first:], first):
        m = SECTION.match(l)
        if m and not m.group(1).endswith('-end') and not m.group(1).startswith('cl-embed'):
            marks.append((i, section_name(m.group(1))))
    order = []
    for _, n in marks:
        if n not in order:
            order.append(n)

    def section_at(i):
        name = marks[0][1]
        for j, n in marks:
            if j > i:
                break
            name = n
        return name

    defs, starts = {}, []
    for i in range(first, len(lines)):
        m = DEFINITION.match(lines[i])
        if not m:
            continue
        head = '\n'.join(lines[i:i + 8])
        brace, semi = head.find('{'), head.find(';')
        if brace >= 0 and (semi < 0 or brace < semi):
            defs[m.group(1)] = i
            starts.append((i, m.group(1)))
    bad = []
    for k, (i, name) in enumerate(starts):
        end = starts[k + 1][0] if k + 1 < len(starts) else len(lines)
        body = '\n'.join(l for l in lines[i:end] if '{' in l or not PROTOTYPE.match(l))
        body = body[body.find('{'):]  # (from the body's brace: a one-line definition's too)
        body = re.sub(r'/\*.*?\*/', '', body, flags=re.S)
        body = re.sub(r'"(?:\\.|[^"\\\n])*"', '""', body)
        here = section_at(i)
        for callee in sorted(set(CALL.findall(body))):
            if callee == name or callee not in defs:
                continue
            there = section_at(defs[callee])
            if order.index(there) > order.index(here):
                bad.append('%s (>>%s, line %d) calls %s (>>%s, line %d)' % (name, here, i + 1, callee, there, defs[callee] + 1))
    return order, bad


def main(argv):
    if argv[1:2] == ['--self-test']:
        path = argv[2] if len(argv) > 2 else 'tinyrec.h'
        text = open(path).read()
        order, bad = analyse(text)
        if bad:
            print('layering self-test: the header itself fails the check')
            return 1
        # a call from the first function of >>base to the last section's first function must be found
        lines = text.split('\n')
        first = next(i for i, l in enumerate(lines) if l.startswith('/* >>base'))
        last = min(i for i, l in enumerate(lines) if SECTION.match(l) and section_name(SECTION.match(l).group(1)) == order[-1])
        callee = next(DEFINITION.match(l).group(1) for l in lines[last:] if DEFINITION.match(l))
        k = next(i for i in range(first, len(lines)) if DEFINITION.match(lines[i]) and '{' in '\n'.join(lines[i:i + 8]))
        brace = next(j for j in range(k, k + 8) if '{' in lines[j])
        lines[brace] = lines[brace] + ' (void)%s(0);' % callee
        _, bad = analyse('\n'.join(lines))
        if not bad:
            print('layering self-test: a call from >>base to %s (>>%s) went unnoticed' % (callee, order[-1]))
            return 1
        print('layering self-test: a call from >>base to >>%s is caught' % order[-1])
        return 0
    path = argv[1] if len(argv) > 1 else 'tinyrec.h'
    order, bad = analyse(open(path).read())
    for b in bad:
        print(b)
    print('layering: %s; %d call(s) to a later section' % (' < '.join(order), len(bad)))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
