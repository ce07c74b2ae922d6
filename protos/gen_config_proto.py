#!/usr/bin/env python3
"""gen_config_proto.py - write protos/config.proto from Perfetto's facts.

shmtrace must accept every TraceConfig that Perfetto accepts, so its
config.proto needs every field name, number and type of TraceConfig,
DataSourceConfig and every typed data-source config at the pinned Perfetto
commit. Those facts live in google/perfetto's merged
protos/perfetto/config/perfetto_config.proto. This script reads that file,
parses the declarations (messages, enums, oneofs, fields, reserved ranges),
keeps TraceConfig and the types it needs transitively (not the descriptor
and service-state messages shmtrace declares elsewhere), and writes them back
out as bare declarations: no comments, no options except those that change
the wire format (none do: `lazy`/`deprecated` are dropped).

Usage (regenerate after bumping the pinned commit):
  git -C PERFETTO show ec5d16b14b743ba6063d720956d6d6af6610fd72:\
protos/perfetto/config/perfetto_config.proto > /tmp/pc.proto
  python3 protos/gen_config_proto.py /tmp/pc.proto > protos/config.proto
"""
import re
import sys

COMMIT = "ec5d16b14b743ba6063d720956d6d6af6610fd72"
ROOT = "TraceConfig"

SCALARS = {"double", "float", "int32", "int64", "uint32", "uint64", "sint32",
           "sint64", "fixed32", "fixed64", "sfixed32", "sfixed64", "bool",
           "string", "bytes"}


def tokenize(text):
    # Line comments first: their text may hold "/*" (glob examples).
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    tok = re.compile(r'"(?:[^"\\]|\\.)*"|[A-Za-z_][A-Za-z0-9_.]*|-?0[xX][0-9a-fA-F]+|-?\d+|[{}\[\]=;,<>()]')
    return tok.findall(text)


class P:
    def __init__(self, toks):
        self.t = toks
        self.i = 0

    def peek(self):
        return self.t[self.i] if self.i < len(self.t) else None

    def next(self):
        v = self.t[self.i]
        self.i += 1
        return v

    def expect(self, v):
        got = self.next()
        if got != v:
            raise SystemExit("expected %r got %r at token %d" % (v, got, self.i))

    def skip_options(self):
        # [name = value, ...] after a field or enum value
        if self.peek() == "[":
            depth = 0
            while True:
                v = self.next()
                if v == "[":
                    depth += 1
                elif v == "]":
                    depth -= 1
                    if depth == 0:
                        return

    def skip_statement(self):
        while self.next() != ";":
            pass

    def enum(self):
        name = self.next()
        self.expect("{")
        vals = []
        while self.peek() != "}":
            if self.peek() in ("option", "reserved"):
                self.skip_statement()
                continue
            if self.peek() == ";":
                self.next()
                continue
            vname = self.next()
            self.expect("=")
            num = self.next()
            self.skip_options()
            self.expect(";")
            vals.append((vname, num))
        self.next()
        if self.peek() == ";":
            self.next()
        return ("enum", name, vals)

    def field(self, label):
        ftype = self.next()
        fname = self.next()
        self.expect("=")
        num = self.next()
        self.skip_options()
        self.expect(";")
        return ("field", label, ftype, fname, num)

    def message(self):
        name = self.next()
        self.expect("{")
        body = []
        while self.peek() != "}":
            k = self.peek()
            if k == ";":
                self.next()
            elif k == "message":
                self.next()
                body.append(self.message())
            elif k == "enum":
                self.next()
                body.append(self.enum())
            elif k == "oneof":
                self.next()
                oname = self.next()
                self.expect("{")
                members = []
                while self.peek() != "}":
                    if self.peek() == "option":
                        self.skip_statement()
                        continue
                    members.append(self.field(None))
                self.next()
                body.append(("oneof", oname, members))
            elif k == "reserved":
                self.next()
                items = []
                while self.peek() != ";":
                    items.append(self.next())
                self.next()
                body.append(("reserved", " ".join(items).replace(" ,", ",")))
            elif k in ("option", "extensions"):
                self.skip_statement()
            elif k in ("optional", "repeated", "required"):
                self.next()
                body.append(self.field(k))
            else:
                raise SystemExit("unexpected %r in message %s" % (k, name))
        self.next()
        if self.peek() == ";":
            self.next()
        return ("message", name, body)

    def file(self):
        defs = []
        while self.peek() is not None:
            k = self.next()
            if k == "message":
                defs.append(self.message())
            elif k == "enum":
                defs.append(self.enum())
            elif k in ("syntax", "package", "option", "import"):
                self.skip_statement()
            else:
                raise SystemExit("unexpected top-level %r" % k)
        return defs


def field_types(node, out):
    if node[0] == "message":
        for b in node[2]:
            field_types(b, out)
    elif node[0] == "oneof":
        for f in node[2]:
            out.add(f[2])
    elif node[0] == "field":
        out.add(node[2])


def needed(defs):
    top = {d[1]: d for d in defs}
    keep, todo = set(), [ROOT]
    while todo:
        n = todo.pop()
        if n in keep or n not in top:
            continue
        keep.add(n)
        types = set()
        field_types(top[n], types)
        for t in types:
            if t in SCALARS:
                continue
            # Nested names resolve inside the message; a top-level
            # dependency is the first component.
            t = re.sub(r"^\.?(perfetto\.)?protos\.", "", t)
            todo.append(t.split(".")[0])
    return [d for d in defs if d[1] in keep]


def emit(node, ind, w):
    pad = "  " * ind
    if node[0] == "enum":
        w("%senum %s {" % (pad, node[1]))
        for v, n in node[2]:
            w("%s  %s = %s;" % (pad, v, n))
        w("%s}" % pad)
    elif node[0] == "message":
        if not node[2]:
            w("%smessage %s {}" % (pad, node[1]))
            return
        w("%smessage %s {" % (pad, node[1]))
        for b in node[2]:
            emit(b, ind + 1, w)
        w("%s}" % pad)
    elif node[0] == "oneof":
        w("%soneof %s {" % (pad, node[1]))
        for f in node[2]:
            emit(f, ind + 1, w)
        w("%s}" % pad)
    elif node[0] == "reserved":
        w("%sreserved %s;" % (pad, node[1]))
    elif node[0] == "field":
        _, label, ftype, fname, num = node
        lab = (label + " ") if label else ""
        w("%s%s%s %s = %s;" % (pad, lab, ftype, fname, num))


def main():
    src = open(sys.argv[1]).read()
    defs = needed(P(tokenize(src)).file())
    lines = []
    w = lines.append
    w("// config.proto - TraceConfig, DataSourceConfig and every typed")
    w("// data-source config, as accepted by Perfetto at commit")
    w("// %s." % COMMIT)
    w("// GENERATED by protos/gen_config_proto.py from the field names, numbers")
    w("// and types of Perfetto's protos/perfetto/config/ (see that script);")
    w("// do not edit by hand. Used by the text-format parser (tools/textproto.c)")
    w("// and by everything that reads a TraceConfig.")
    w('syntax = "proto2";')
    w("package perfetto.protos;")
    w("")
    for d in defs:
        emit(d, 0, w)
        w("")
    sys.stdout.write("\n".join(lines).rstrip("\n") + "\n")


if __name__ == "__main__":
    main()
