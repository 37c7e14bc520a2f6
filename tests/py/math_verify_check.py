"""rlcpp's boxed grader against Math-Verify (PyPI `math-verify`, pinned in scripts/requirements.txt;
huggingface/Math-Verify) on three sets of pairs (tests/test_math_verify.sh):

    table     every row of tests/data/math_equal_cases.txt, labelled by the table
    corpus    generated answer forms (numbers, fractions, roots, intervals, sets, tuples, labelled
              answers, "or" lists, inequalities, lines, units, LaTeX wrappers), each truth with
              equivalent answers (label 1) and near misses (label 0); deterministic
    held-out  Math-Verify's own test cases, tests/data/math_verify_cases.jsonl, labelled by its tests

    python math_verify_check.py write-input OUT.jsonl             rlcpp grade's input, one pair a line
    python math_verify_check.py verdicts OUT.jsonl                Math-Verify's verdict on every pair
    python math_verify_check.py compare INPUT.jsonl RLCPP.jsonl [--verdicts FILE]
    python math_verify_check.py extract-cases TESTS_DIR COMMIT    rewrite math_verify_cases.jsonl

rlcpp sees {"response": "\\boxed{answer}", "gt_answer": truth}; Math-Verify sees the same two strings,
the truth as `$truth$`: verify(parse("$truth$"), parse(response)), each call with a timeout.
compare prints the agreement per set and every disagreement by class, and exits 1 on a new false
positive: rlcpp says right, Math-Verify says wrong, the pair's label does not say rlcpp is right, and
tests/data/math_verify_disagreements.txt does not list it (that file says who is right and why). A pair
Math-Verify accepts and rlcpp refuses is listed, not failed: rlcpp errs towards "wrong" by design.
--verdicts reuses the file `verdicts` wrote (pairs missing from it are graded afresh)."""
import ast
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data")
TABLE = os.path.join(DATA, "math_equal_cases.txt")
CASES = os.path.join(DATA, "math_verify_cases.jsonl")
KNOWN = os.path.join(DATA, "math_verify_disagreements.txt")


# --- (a) the table ---------------------------------------------------------------------------------
def table_pairs():
    pairs, heading = [], "table"
    for line_no, line in enumerate(open(TABLE, encoding="utf-8"), 1):
        line = line.rstrip("\n")
        if line.startswith("# ---"):
            heading = line[5:].strip()
        if not line or line.startswith("#"):
            continue
        a, b = line.find(" ||| "), line.rfind(" ||| ")
        answer, truth = line[:a], line[a + 5:b]
        pairs.append({"id": f"table:{line_no}", "source": "table", "class": heading, "answer": answer,
                      "truth": truth, "label": int(line[b + 5:] == "1")})
    return pairs


# --- (b) the generated corpus ----------------------------------------------------------------------
# Each entry: class, truth, [(answer, label)]; label 1 = the same value or set, 0 = a near miss,
# None = a convention graders differ on (no label: neither side is excused).
def corpus_groups():
    groups = []

    def add(klass, truth, *answers):
        groups.append((klass, truth, answers))

    for n, text in ((1234, "1,234"), (45000, "45{,}000"), (1234567, "1,234,567"), (12500, "12,\\!500")):
        add("integers and separators", str(n), (text, 1), (str(n + 1), 0), (str(n) + ".0", 1), (str(n * 10), 0))
    add("integers and separators", "41250", ("41, 250", 0), ("41,250", 1), ("4125", 0))
    add("integers and separators", "-17", ("-17", 1), ("17", 0), ("- 17", 1), ("-017", 1))
    for value, forms, misses in (("0.5", [".5", "0.50", "\\frac{1}{2}", "1/2"], ["0.05", "5", "0.55"]),
                                 ("2.25", ["2.250", "\\frac{9}{4}", "2\\frac{1}{4}"], ["2.2", "22.5", "2.52"]),
                                 ("0.125", ["\\frac18", "1/8", ".125"], ["0.13", "0.12", "0.1250001"])):
        add("decimals", value, *[(f, 1) for f in forms], *[(m, 0) for m in misses])
    for truth, forms, misses in (("\\frac{3}{4}", ["\\dfrac{3}{4}", "3/4", "0.75", "\\frac{6}{8}", "\\tfrac34"],
                                  ["\\frac{4}{3}", "\\frac{3}{5}", "0.74"]),
                                 ("-\\frac{2}{5}", ["\\frac{-2}{5}", "-0.4", "-2/5"], ["\\frac{2}{5}", "-\\frac{5}{2}"]),
                                 ("\\frac{7}{3}", ["2\\frac{1}{3}", "2 1/3", "\\frac{14}{6}", "2.33", "2.333"],
                                  ["\\frac{5}{3}", "2\\frac{1}{4}", "2.34", "2.32"])):
        add("fractions and mixed numbers", truth, *[(f, 1) for f in forms], *[(m, 0) for m in misses])
    add("fractions and mixed numbers", "\\frac{7}{3}", ("2.3", None))  # two significant digits: rlcpp's rounding rule
    add("percentages", "25\\%", ("25\\%", 1), ("25", 1), ("25 percent", 1), ("2.5\\%", 0), ("26\\%", 0), ("0.25", None))
    add("percentages", "0.4", ("40\\%", 1), ("0.4", 1), ("4\\%", 0))
    for truth, forms, misses in (("2\\sqrt{2}", ["\\sqrt{8}", "2\\sqrt2", "\\sqrt{2}\\cdot 2"], ["2.83", "\\sqrt{6}", "2\\sqrt{3}"]),
                                 ("\\frac{\\sqrt{3}}{2}", ["\\frac{\\sqrt3}{2}", "\\frac{1}{2}\\sqrt{3}", "\\frac{3}{2\\sqrt{3}}"],
                                  ["\\frac{\\sqrt{2}}{2}", "\\sqrt{3}", "0.87"]),
                                 ("3\\sqrt[3]{2}", ["\\sqrt[3]{54}"], ["\\sqrt[3]{6}", "3\\sqrt{2}"])):
        add("roots", truth, *[(f, 1) for f in forms], *[(m, 0) for m in misses])
    for truth, forms, misses in (("2\\pi", ["2 \\pi", "\\pi \\cdot 2", "\\frac{4\\pi}{2}"], ["6.28", "\\pi", "2\\pi^2"]),
                                 ("\\frac{\\pi}{6}", ["\\frac{1}{6}\\pi", "\\pi/6"], ["\\frac{\\pi}{3}", "0.52", "30"])):
        add("pi", truth, *[(f, 1) for f in forms], *[(m, 0) for m in misses])
    add("scientific notation", "1500", ("1.5\\times10^{3}", 1), ("1.5e3", 1), ("1.5 \\times 10^3", 1), ("1.5\\times10^{4}", 0),
        ("15\\times10^{2}", 1), ("1.5e4", 0))
    add("scientific notation", "6.02\\times10^{23}", ("6.02e23", 1), ("6.02\\times 10^{22}", 0), ("602\\times10^{21}", 1))
    for truth, forms, misses in (("[1,3)", ["[1, 3)", "\\left[1,3\\right)"], ["[1,3]", "(1,3)", "(1,3]", "[1,4)"]),
                                 ("(-\\infty,2]\\cup[3,\\infty)", ["(-\\infty, 2] \\cup [3, \\infty)", "[3,\\infty)\\cup(-\\infty,2]"],
                                  ["(-\\infty,2)\\cup[3,\\infty)", "(-\\infty,2]\\cup(3,\\infty)", "(-\\infty,3]\\cup[2,\\infty)"]),
                                 ("(-2,0)\\cup(0,2)", ["(0,2)\\cup(-2,0)"], ["(-2,2)", "(-2,0]\\cup(0,2)", "(0,2)"])):
        add("intervals and unions", truth, *[(f, 1) for f in forms], *[(m, 0) for m in misses])
    for truth, forms, misses in (("\\{1,2,3\\}", ["\\{3,2,1\\}", "\\{1, 2, 3\\}", "1, 2, 3", "3,1,2"], ["\\{1,2\\}", "\\{1,2,4\\}"]),
                                 ("\\{-1,\\frac{1}{2}\\}", ["\\{0.5,-1\\}", "-1, \\frac12"], ["\\{1,\\frac12\\}", "-1"])):
        add("sets", truth, *[(f, 1) for f in forms], *[(m, 0) for m in misses])
    for truth, forms, misses in (("(1,2)", ["(1, 2)", "\\left(1,2\\right)", "( 1 , 2 )"], ["(2,1)", "(1,2,3)", "[1,2]", "(1,3)"]),
                                 ("(3,-\\frac{1}{2},0)", ["(3,-0.5,0)", "(3, -1/2, 0)"], ["(3,\\frac12,0)", "(3,0,-\\frac12)"])):
        add("tuples", truth, *[(f, 1) for f in forms], *[(m, 0) for m in misses])
    for truth, forms, misses in (("x=5", ["5", "x = 5", "x=5.0"], ["6", "x=6", "-5"]),
                                 ("5", ["x=5", "n = 5"], ["x=6", "x < 5"]),
                                 ("y=\\frac{3}{2}", ["\\frac32", "1.5", "y=1.5"], ["\\frac23", "y=2"])):
        add("labelled answers", truth, *[(f, 1) for f in forms], *[(m, 0) for m in misses])
    add("several variables", "x=2, y=3", ("x=2, y=3", 1), ("y = 3, x = 2", 1), ("2, 3", 1), ("3, 2", 0),
        ("x=3, y=2", 0), ("x=2, y=4", 0), ("2", 0), ("(2,3)", 1))
    add("several variables", "x = -5,\\ p = \\frac{14}{3}", ("-5, \\frac{14}{3}", 1), ("-5, 14/3", 1), ("\\frac{14}{3}, -5", 0),
        ("-5, \\frac{14}{5}", 0), ("x=-5, p=\\frac{14}{3}", 1), ("5, \\frac{14}{3}", 0))
    add("several variables", "p=5,q=2;p=7,q=2", ("(5,2),(7,2)", 1), ("(7,2),(5,2)", 1), ("(5,2)", 0), ("(2,5),(2,7)", 0),
        ("(5,2),(7,3)", 0), ("(5,2),(7,2),(3,2)", 0), ("(5,2);(7,2)", 1), ("p=7,q=2;p=5,q=2", 1))
    add("several variables", "a=1,b=2,c=3", ("1, 2, 3", 1), ("1, 3, 2", 0), ("a=1, c=3, b=2", 1), ("1, 2", 0))
    add("several variables", "2, 3", ("x=2, y=3", 0), ("x = 2 \\text{ or } x = 3", 1), ("x=2, x=3", 1))
    for truth, forms, misses in (("2, 3", ["2 \\text{ or } 3", "2 or 3", "2\\text{ or }3", "3 \\text{ and } 2", "2\\text{or}3"],
                                  ["2 \\text{ or } 4", "2", "2 \\text{ or } 3 \\text{ or } 5"]),
                                 ("(1,2),(2,1)", ["(1,2) \\text{ or } (2,1)", "(2,1)or(1,2)", "(1,2)\\text{or}(2,1)"],
                                  ["(1,2)or(2,2)", "(1,2)", "(1,2) \\text{ or } (1,2)"]),
                                 ("19, 46, 82", ["19, 46, and 82", "19, 46, \\text{ and } 82", "82, 46, \\text{or } 19"],
                                  ["19, 46, and 83", "19 and 46"])):
        add("or and and lists", truth, *[(f, 1) for f in forms], *[(m, 0) for m in misses])
    for truth, forms, misses in (("(3,\\infty)", ["x>3", "x > 3", "3<x", "x \\gt 3"], ["x \\ge 3", "x<3", "[3,\\infty)"]),
                                 ("[-2,5]", ["-2\\le x\\le 5", "-2 \\leq x \\leq 5", "x\\in[-2,5]"], ["-2<x\\le5", "-2\\le x<5", "[-2,5)"]),
                                 ("(0,1)", ["0<f(x)<1", "0 < y < 1"], ["0\\le f(x)<1", "0<f(x)\\le 1", "[0,1]"]),
                                 ("0<f(x)<1", ["(0,1)", "0 < f(x) < 1"], ["0<x<1", "[0,1)", "0<f(x)\\le1"]),
                                 ("(-2,2)", ["|x|<2", "-2<x<2"], ["|x|\\le 2", "|x|<4", "x<2"]),
                                 ("1\\le|z|\\le\\frac{3}{2}", ["[-\\frac{3}{2},-1]\\cup[1,\\frac{3}{2}]",
                                                               "z \\in \\left[-\\frac32, -1\\right] \\cup \\left[1, \\frac32\\right]",
                                                               "[1,\\frac32]\\cup[-\\frac32,-1]"],
                                  ["[1,\\frac{3}{2}]", "[-\\frac{3}{2},\\frac{3}{2}]", "(-\\frac{3}{2},-1)\\cup(1,\\frac{3}{2})",
                                   "[-\\frac{3}{2},-1]\\cup[1,2]"]),
                                 ("(-\\infty,-1)\\cup(1,\\infty)", ["|x|>1", "(1,\\infty)\\cup(-\\infty,-1)"], ["|x|\\ge1", "x>1", "|x|<1"]),
                                 ("x<1", ["x<1", "-x>-1", "1>x", "(-\\infty,1)"], ["y<1", "x\\le1", "x>1"])):
        add("inequalities", truth, *[(f, 1) for f in forms], *[(m, 0) for m in misses])
    for truth, forms, misses in (("y=2x+3", ["2x-y+3=0", "y-2x=3", "y = 3 + 2x", "4x-2y=-6", "2x+3"], ["y=2x-3", "y=3x+2", "2x-3"]),
                                 ("2x+4y-3=0", ["y=-\\frac{1}{2}x+\\frac{3}{4}", "y=-x/2+3/4", "x+2y=\\frac32", "y = \\frac{3-2x}{4}"],
                                  ["y=-\\frac{1}{2}x+\\frac{3}{2}", "x+2y=3", "y=\\frac{1}{2}x+\\frac{3}{4}"]),
                                 ("y=\\frac{1}{3}x-2", ["x-3y=6", "3y=x-6", "y=\\frac{x-6}{3}"], ["x-3y=-6", "y=3x-2", "y=\\frac{x}{3}+2"])):
        add("equations of lines", truth, *[(f, 1) for f in forms], *[(m, 0) for m in misses])
    for truth, forms, misses in (("5", ["5 \\text{ cm}", "5\\text{ cm}", "5 cm", "5 \\text{cm}^2", "\\text{5}", "\\textbf{5}"],
                                  ["6 \\text{ cm}", "5x", "50"]),
                                 ("30", ["30^\\circ", "30^{\\circ}", "30°", "30 \\text{ degrees}"], ["60^\\circ", "3"]),
                                 ("12", ["\\$12", "12 dollars", "\\$12.00", "$12$", "\\left(12\\right)", "\\mathrm{12}"], ["\\$21", "12.5"])):
        add("units, degrees and wrappers", truth, *[(f, 1) for f in forms], *[(m, 0) for m in misses])
    add("units, degrees and wrappers", "30", ("\\frac{\\pi}{6}", None))  # the question decides: radians, degrees
    add("units, degrees and wrappers", "5", ("50 \\text{ mm}", None))  # the truth's unit is not known
    return groups


def corpus_pairs():
    pairs, counts = [], {}
    for klass, truth, answers in corpus_groups():
        for answer, label in answers:
            counts[klass] = counts.get(klass, 0) + 1
            pairs.append({"id": f"corpus:{klass}:{counts[klass]}", "source": "corpus", "class": klass, "answer": answer,
                          "truth": truth, "label": label})
    return pairs


# --- (c) Math-Verify's own test cases --------------------------------------------------------------
def held_out_pairs():
    pairs = []
    for k, line in enumerate(open(CASES, encoding="utf-8")):
        case = json.loads(line)
        if "gold" not in case:
            continue  # the header line
        pairs.append({"id": f"held-out:{case['test']}:{k}", "source": "held-out", "class": case["test"].split("::")[-1],
                      "answer": None, "response": case["response"], "truth": case["gt_answer"],
                      "label": case["expected"]})
    return pairs


def all_pairs():
    return table_pairs() + corpus_pairs() + held_out_pairs()


def response_of(pair):
    return pair["response"] if pair.get("answer") is None else "\\boxed{" + pair["answer"] + "}"


def key_of(response, truth):
    return response + "\x00" + truth


# --- Math-Verify ------------------------------------------------------------------------------------
class _Timeouts:
    """Counts Math-Verify's logged timeouts (it logs one and answers "wrong")."""
    def __init__(self):
        import logging
        self.count = 0
        handler = logging.Handler(logging.WARNING)
        handler.emit = lambda record: setattr(self, "count", self.count + ("imeout" in record.getMessage()))
        logger = logging.getLogger("math_verify")
        logger.handlers, logger.propagate = [handler], False  # quiet: it logs each answer it cannot parse


TIMEOUT_S = 20  # per parse and per comparison; a loaded machine makes Math-Verify several times slower
MAX_NESTING = 16  # its LaTeX parser takes seconds on 30 nested parentheses (the table's hostile rows)


def nesting(text):
    depth = deepest = 0
    for c in text:
        depth += c in "([{"
        depth -= c in ")]}"
        deepest = max(deepest, depth)
    return deepest


def math_verify(response, truth, timeouts=None):
    """(verdict 0/1, note): Math-Verify with its default settings on one pair, the truth as `$truth$`.
    A timeout is its "wrong", noted "timeout" (compare does not count it as a verdict); an answer
    nested deeper than MAX_NESTING is not given to it (verdict 0, noted "nested")."""
    from math_verify import parse, verify
    if max(nesting(response), nesting(truth)) > MAX_NESTING:
        return 0, "nested"
    timeouts = timeouts or _Timeouts()
    before = timeouts.count
    gold = parse(truth if "\\boxed" in truth else f"${truth}$", parsing_timeout=TIMEOUT_S)
    pred = parse(response, parsing_timeout=TIMEOUT_S)
    verdict = int(verify(gold, pred, timeout_seconds=TIMEOUT_S))
    return verdict, "timeout" if timeouts.count > before else ""


def grade_all(pairs, recorded=None):
    timeouts, verdicts, started = _Timeouts(), {}, time.time()
    for pair in pairs:
        key = key_of(response_of(pair), pair["truth"])
        if key in verdicts:
            continue
        if recorded and key in recorded:
            verdicts[key] = recorded[key]
        else:
            verdict, note = math_verify(response_of(pair), pair["truth"], timeouts)
            verdicts[key] = {"math_verify": verdict, "note": note}
    return verdicts, time.time() - started


# --- modes ------------------------------------------------------------------------------------------
def write_input(path):
    with open(path, "w", encoding="utf-8") as out:
        for pair in all_pairs():
            out.write(json.dumps({"response": response_of(pair), "gt_answer": pair["truth"], "id": pair["id"]},
                                 ensure_ascii=False) + "\n")


def write_verdicts(path):
    pairs = all_pairs()
    verdicts, seconds = grade_all(pairs)
    with open(path, "w", encoding="utf-8") as out:
        for pair in pairs:
            v = verdicts[key_of(response_of(pair), pair["truth"])]
            out.write(json.dumps({"id": pair["id"], "response": response_of(pair), "gt_answer": pair["truth"], **v},
                                 ensure_ascii=False) + "\n")
    notes = [v["note"] for v in verdicts.values() if v["note"]]
    print(f"{len(pairs)} pairs ({len(verdicts)} distinct), Math-Verify accepts "
          f"{sum(v['math_verify'] for v in verdicts.values())}, {notes.count('timeout')} timed out, "
          f"{notes.count('nested')} not given to it (nested deeper than {MAX_NESTING}), {seconds:.1f} s")


def read_known():
    """(answer or response, truth) -> (who is right, why) from math_verify_disagreements.txt."""
    known = {}
    for line in open(KNOWN, encoding="utf-8"):
        line = line.rstrip("\n")
        if not line or line.startswith("#"):
            continue
        parts = line.split(" ||| ")
        if len(parts) != 4 or parts[2] not in ("rlcpp", "math-verify", "neither"):
            sys.exit(f"{KNOWN}: expected 'answer ||| truth ||| rlcpp|math-verify|neither ||| why', got: {line}")
        known[(parts[0], parts[1])] = (parts[2], parts[3])
    return known


def compare(input_path, rlcpp_path, verdicts_path=None):
    rows = [json.loads(l) for l in open(input_path, encoding="utf-8") if l.strip()]
    graded = [json.loads(l) for l in open(rlcpp_path, encoding="utf-8") if l.strip()]
    pairs = {p["id"]: p for p in all_pairs()}
    if len(rows) != len(graded):
        sys.exit(f"{len(rows)} pairs in {input_path} but {len(graded)} verdicts in {rlcpp_path}")
    recorded = None
    if verdicts_path:
        recorded = {key_of(v["response"], v["gt_answer"]): v for v in map(json.loads, open(verdicts_path, encoding="utf-8"))}
    ordered = [pairs[r["id"]] for r in rows]
    verdicts, seconds = grade_all(ordered, recorded)
    known, seen_known = read_known(), set()
    stats, disagreements, new_false_positives, timed_out = {}, [], 0, []
    for pair, verdict in zip(ordered, graded):
        mv, note = (verdicts[key_of(response_of(pair), pair["truth"])][k] for k in ("math_verify", "note"))
        rl = int(bool(verdict["correct"]))
        if note == "timeout":  # no verdict: Math-Verify ran out of time (a loaded machine)
            timed_out.append(pair["id"])
            continue
        s = stats.setdefault(pair["source"], [0, 0, 0, 0])  # pairs, agreements, rlcpp-only, Math-Verify-only
        s[0] += 1
        s[1] += rl == mv
        s[2] += rl > mv
        s[3] += rl < mv
        if rl == mv:
            continue
        shown = pair["answer"] if pair.get("answer") is not None else pair["response"]
        listed = known.get((shown, pair["truth"]))
        if listed:
            seen_known.add((shown, pair["truth"]))
        new = rl == 1 and pair["label"] != 1 and not listed
        new_false_positives += new
        disagreements.append((pair["source"], pair["class"], shown, pair["truth"], rl, mv, pair["label"], listed, new))
    print(f"Math-Verify graded {len(verdicts)} distinct pairs in {seconds:.1f} s" +
          (f"; {len(timed_out)} timed out and are left out: {', '.join(timed_out)}" if timed_out else ""))
    for source in ("table", "corpus", "held-out"):
        if source in stats:
            n, agree, rl_only, mv_only = stats[source]
            print(f"{source:9s} {agree:4d} / {n:4d} agree ({100.0 * agree / n:5.1f}%); rlcpp alone accepts {rl_only}, "
                  f"Math-Verify alone accepts {mv_only}")
    by_class = {}
    for d in disagreements:
        by_class.setdefault((d[0], d[1]), []).append(d)
    for (source, klass), items in sorted(by_class.items()):
        print(f"\n[{source}] {klass}")
        for _, _, shown, truth, rl, mv, label, listed, new in items:
            mark = "NEW FALSE POSITIVE" if new else (f"known: {listed[0]} is right" if listed else
                                                     "rlcpp refuses" if rl == 0 else "label says rlcpp is right")
            print(f"  rlcpp {rl} math-verify {mv} label {label if label is not None else '-'}  "
                  f"{shown!r} vs {truth!r}  [{mark}]")
    stale = [k for k in known if k not in seen_known]
    if stale:
        print(f"\n{len(stale)} listed disagreements no longer disagree (or are not among the pairs):")
        for answer, truth in stale:
            print(f"  {answer!r} vs {truth!r}")
    print(f"\n{len(disagreements)} disagreements, {new_false_positives} new false positives")
    return 1 if new_false_positives else 0


# --- extract-cases: Math-Verify's test files -> math_verify_cases.jsonl ------------------------------
def strip_math(text):
    """The answer inside `$...$`, `$$...$$`, `\\(...\\)` or `\\[...\\]` (all delimiters dropped)."""
    out = text
    for delimiter in ("$$", "\\(", "\\)", "\\[", "\\]"):
        out = out.replace(delimiter, " ")
    out = "".join(" " if c == "$" and (k == 0 or out[k - 1] != "\\") else c for k, c in enumerate(out))
    return out.strip().rstrip(".").strip()


def prose(text):
    """Words of three letters or more outside LaTeX commands and \\text{...}: a sentence, not an answer."""
    words, k = 0, 0
    while k < len(text):
        if text[k] == "\\":
            k += 1
            while k < len(text) and text[k].isalpha():
                k += 1
            continue
        j = k
        while j < len(text) and text[j].isascii() and text[j].isalpha():
            j += 1
        words += j - k >= 3
        k = max(j, k + 1)
    return words > 2


def words_outside_math(text):
    """Words outside `$...$` and `\\(...\\)` spans ("Answer $9$"), or more than one word in text with none
    ("28 percent" is an answer, "the number is 10" a sentence)."""
    spans = text.replace("\\(", "$").replace("\\)", "$").replace("\\[", "$").replace("\\]", "$").split("$")
    if len(spans) == 1:
        return sum(len(w) >= 2 and w.isalpha() for w in text.split()) > 1
    return any(prose(outside + " xxx xxx") for outside in spans[0::2])


def boxed_contents(text):
    """The contents of every \\boxed{...}, each once, joined by ", " (a gold answer boxed twice is one)."""
    found, k = [], 0
    while True:
        at = text.find("\\boxed{", k)
        if at < 0:
            break
        depth, j = 0, at + 6
        while j < len(text):
            depth += text[j] == "{"
            depth -= text[j] == "}"
            if depth == 0:
                break
            j += 1
        if text[at + 7:j] not in found:
            found.append(text[at + 7:j])
        k = j
    return ", ".join(found)


def extract_cases(tests_dir, commit):
    cases = []
    for name in sorted(os.listdir(tests_dir)):
        if not (name.startswith("test_") and name.endswith(".py")):
            continue
        tree = ast.parse(open(os.path.join(tests_dir, name), encoding="utf-8").read())
        for fn in (x for x in tree.body if isinstance(x, ast.FunctionDef)):
            for decorator in fn.decorator_list:
                if not (isinstance(decorator, ast.Call) and getattr(decorator.func, "attr", "") == "parametrize"):
                    continue
                fields = [f.strip() for f in ast.literal_eval(decorator.args[0]).split(",")]
                if fields[:2] != ["gold", "pred"] or len(decorator.args) < 2:
                    continue
                for row in decorator.args[1].elts:
                    try:
                        values = dict(zip(fields, ast.literal_eval(row)))
                    except ValueError:
                        continue  # an f-string row
                    if "strict" in values or "allow_set_relation_comp" in values:
                        continue  # cases about a setting of verify, labelled for that setting
                    gold, pred = values["gold"], values["pred"]
                    expected = values.get("expected", values.get("result"))
                    if values.get("precision", 6) != 6 or any(ord(c) < 32 and c != "\n" for c in gold + pred):
                        continue  # another float_rounding; a non-raw "\t" in the source
                    truth = boxed_contents(gold) if "\\boxed{" in gold else strip_math(gold)
                    answer = None if "\\boxed{" in pred else strip_math(pred)
                    shown = boxed_contents(pred) if answer is None else answer
                    if (not truth or not shown or len(truth) > 150 or len(shown) > 150 or prose(truth) or prose(shown)
                            or "\n" in truth or (answer is not None and words_outside_math(pred))):
                        continue  # a worked solution or a sentence, not an answer
                    response = pred if answer is None else "\\boxed{" + answer + "}"
                    if len(response) > 300:
                        continue
                    cases.append({"test": f"tests/{name}::{fn.name}", "gold": gold, "pred": pred, "expected": int(expected),
                                  "gt_answer": truth, "response": response})
    seen, unique = set(), []
    for case in cases:
        if (case["response"], case["gt_answer"]) not in seen:
            seen.add((case["response"], case["gt_answer"]))
            unique.append(case)
    timeouts = _Timeouts()
    for case in unique:
        case["math_verify"] = math_verify(case["response"], case["gt_answer"], timeouts)[0]
    header = {"comment": "Math-Verify's own test cases (gold, pred, expected) as answer pairs: rlcpp grades "
              "response against gt_answer, math_verify is Math-Verify 0.9.0's verdict on that same pair (gold as "
              "$gt_answer$). Source: https://github.com/huggingface/Math-Verify tests/*.py at commit " + commit +
              ", Apache License 2.0 (the repository's LICENCE). Written by tests/py/math_verify_check.py extract-cases; "
              "worked solutions and non-default verify settings left out."}
    with open(CASES, "w", encoding="utf-8") as out:
        out.write(json.dumps(header) + "\n")
        for case in unique:
            out.write(json.dumps(case, ensure_ascii=False) + "\n")
    print(f"{len(unique)} cases written to {CASES}; Math-Verify's verdict on the pair differs from its test's "
          f"expected in {sum(c['math_verify'] != c['expected'] for c in unique)}")


def main(argv):
    usage = "usage:\n" + __doc__.split("\n\n")[2]
    if len(argv) >= 2 and argv[0] == "write-input":
        write_input(argv[1])
    elif len(argv) >= 2 and argv[0] == "verdicts":
        write_verdicts(argv[1])
    elif len(argv) in (3, 5) and argv[0] == "compare" and (len(argv) == 3 or argv[3] == "--verdicts"):
        return compare(argv[1], argv[2], argv[4] if len(argv) == 5 else None)
    elif len(argv) == 3 and argv[0] == "extract-cases":
        extract_cases(argv[1], argv[2])
    else:
        sys.exit(usage)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
