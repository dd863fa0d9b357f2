"""The PTX parser's tokenizer (:func:`splice.ptx.tokenize`): one match per token, checked
against a reference tokenizer that matches the whitespace and the token separately (the
tokenizer before issue 11's speed-up) on PTX-like text: the same tokens, the same errors."""

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from splice.ptxtools.ptx import PTXSyntaxError, tokenize
from support import fuzz

_OLD_TOKEN_RE = re.compile(r"""
    (?P<ws>[ \t\r\f\v]+)
  | (?P<nl>\n)
  | (?P<lcomment>//[^\n]*)
  | (?P<bcomment>/\*.*?\*/)
  | (?P<badcomment>/\*)
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<directive>\.[A-Za-z_][A-Za-z0-9_$:]*)
  | (?P<reg>%[A-Za-z_$][A-Za-z0-9_$]*(?:\.[xyzw])?)
  | (?P<number>0[fFdD][0-9a-fA-F]+|0[xX][0-9a-fA-F]+U?
               |[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|[0-9]+(?:[eE][+-]?[0-9]+)?U?)
  | (?P<ident>[A-Za-z_$][A-Za-z0-9_$]*(?:\.[A-Za-z0-9_:]+)*)
  | (?P<punct>::|[;:,{}()\[\]<>@!+\-*/=|&^~?])
""", re.VERBOSE | re.DOTALL)


def _old_tokenize(text: str, pos: int) -> list:
    out: list = []
    while pos < len(text):
        m = _OLD_TOKEN_RE.match(text, pos)
        if m is None:
            if text.startswith("/*", pos):
                raise PTXSyntaxError(f"unterminated /* comment at {_lc(text, pos)}")
            if text[pos] == '"':
                raise PTXSyntaxError(f"unterminated string at {_lc(text, pos)}")
            raise PTXSyntaxError(f"unexpected character {text[pos]!r} at {_lc(text, pos)}")
        kind = m.lastgroup or ""
        if kind == "badcomment":
            raise PTXSyntaxError(f"unterminated /* comment at {_lc(text, pos)}")
        if kind == "nl" or (kind == "bcomment" and "\n" in m.group()):
            out.append("\n")
        elif kind not in ("ws", "lcomment", "bcomment"):
            out.append((kind, m.group(), m.start(), m.end()))
        pos = m.end()
    return out


def _lc(text: str, pos: int) -> str:
    line_start = text.rfind(chr(10), 0, pos) + 1
    return f"line {text.count(chr(10), 0, pos) + 1}, column {pos - line_start + 1}"


def _outcome(fn):
    try:
        return [t if isinstance(t, str) else tuple(t) for t in fn()], None
    except PTXSyntaxError as e:
        return None, str(e)


_PIECES = [" ", "\t", "\r", "\f", "\v", "\n", "\r\n", "//c", "/*", "*/", "/* x */", "/*\n*/",
           '"', '"s"', '"a\\"b"', "\\", ".reg", ".f32", "%r1", "%tid.x", "0f3F800000", "0x1F",
           "1.5e3", "12U", "abc", "a.b.c", "$x", "_", ";", ":", "::", ",", "{", "}", "(", ")",
           "[", "]", "<", ">", "@", "!", "+", "-", "*", "/", "=", "|", "&", "^", "~", "?",
           "#", "`", "\x00", "\u00e9", "'", "9", ".", "%"]


@settings(max_examples=fuzz.examples("SPLICE_TOKENIZER_FUZZ_EXAMPLES", 150), deadline=None,
          suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from(_PIECES), max_size=25).map("".join), st.integers(0, 6))
def test_tokenizer_matches_the_two_match_tokenizer(text, pos):
    pos = min(pos, len(text))
    assert _outcome(lambda: tokenize(text, pos)) == _outcome(lambda: _old_tokenize(text, pos))
