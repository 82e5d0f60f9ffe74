"""Every box a visitor can type into has a limit the server checks (issue 43): the boxes are found in the page files
with ast and each must be named in docs/deploying.md's table; over-long values fed the way a crafted WebSocket
message or a link feeds them get a clear message, never an exception. The hostile sizes run in a child process whose
address space is capped (resource.setrlimit), so a missing check fails there rather than taking the machine."""

from __future__ import annotations

import ast
import json
import re
import textwrap
from pathlib import Path

import pytest

from gptviz.app import keys as K
from gptviz.app import links, text_limits
from gptviz.app import settings as S
from tests.support import ROOT
from tests.support.cli import run_python

GUIDE = ROOT / "docs" / "deploying.md"
TEXT = {"text_input", "text_area", "chat_input"}
TYPED = TEXT | {"number_input", "file_uploader", "data_editor", "camera_input", "audio_input"}
CHECKED = {"checked_text"}  # helpers that draw a box passed to them, with max_chars set
HUGE = 10_000_000  # the audit's 10 MB word


def page_files() -> list[Path]:
    return sorted([*(ROOT / "app_pages").glob("*.py"), *(ROOT / "gptviz" / "app").rglob("*.py")])


def record_of(node) -> S.Setting | None:
    """The settings.py record `node` names (`S.UNIT_INDEX`), else None."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "S":
        record = getattr(S, node.attr, None)
        return record if isinstance(record, S.Setting) else None
    return None


def label_texts(label) -> list[str]:
    """A label's possible texts: a string, a record's label (`S.UNIT_INDEX.label`), or either side of a conditional
    ("Neuron" if ... else "Head"); [] for a variable or a formatted string."""
    if isinstance(label, ast.Constant) and isinstance(label.value, str):
        return [label.value]
    if isinstance(label, ast.Attribute) and label.attr == "label" and record_of(label.value):
        return [record_of(label.value).label]
    if isinstance(label, ast.IfExp):
        return label_texts(label.body) + label_texts(label.orelse)
    return []


def typed_boxes(path: Path) -> list[dict]:
    """Every call that draws a box a visitor types into: its kind, its labels (the label's string constants, or the
    enclosing function's name when the label is a variable), its keyword names and its line."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []

    def visit(node, function: str):
        for child in ast.iter_child_nodes(node):
            visit(child, child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function)
        if not isinstance(node, ast.Call):
            return
        func = node.func
        keywords = {k.arg for k in node.keywords}
        if isinstance(func, ast.Attribute) and func.attr in TYPED and record_of(func.value):
            # a record draws its widget (S.WHY_N.number_input(col)): its label, and the bounds its rule passes
            record = record_of(func.value)
            label = next((k.value for k in node.keywords if k.arg == "label"), None)
            labels = label_texts(label) if label is not None else [record.label]
            keywords |= set(record.rule.widget_args(func.attr, record.default)) if record.rule is not None else set()
            found.append(
                {
                    "kind": func.attr,
                    "labels": labels or [function],
                    "via": None,
                    "line": node.lineno,
                    "keywords": keywords,
                    "positional": 0,
                }
            )
            return
        where = node.args[0] if node.args else None
        if (
            isinstance(func, ast.Attribute)
            and func.attr in TYPED
            and (isinstance(where, ast.Subscript) or isinstance(where, ast.Name) and where.id == "st")
        ):
            # a record held in a variable draws its widget where it is told (c.tokens.number_input(g[0]) or (st)),
            # where Streamlit's own boxes take a label first. Named by the enclosing function; its bounds are its
            # rule's (test_every_numeric_record_has_bounds) or passed here
            found.append(
                {
                    "kind": func.attr,
                    "labels": [function],
                    "via": "record",
                    "line": node.lineno,
                    "keywords": keywords,
                    "positional": 0,
                }
            )
            return
        if isinstance(func, ast.Attribute) and func.attr in TYPED:
            kind, args, via = func.attr, node.args, None
        else:  # a box handed to a helper that draws it: checked_text(p1.text_area, "Clean prompt", ...)
            handed = [i for i, a in enumerate(node.args) if isinstance(a, ast.Attribute) and a.attr in TYPED]
            if not handed:
                return
            kind, args = node.args[handed[0]].attr, node.args[handed[0] + 1 :]
            via = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "?")
        label = args[0] if args else next((k.value for k in node.keywords if k.arg == "label"), None)
        labels = label_texts(label)
        found.append(
            {
                "kind": kind,
                "labels": labels or [function],
                "via": via,
                "line": node.lineno,
                "keywords": keywords,
                "positional": len(node.args),
            }
        )

    visit(tree, "<module>")
    return found


def recorded() -> dict[str, list[set[str]]]:
    """docs/deploying.md's "What a visitor can type" table: file -> the box names of each of its rows."""
    text = GUIDE.read_text(encoding="utf-8")
    section = text.split("## What a visitor can type", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, list[set[str]]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[0].startswith("`"):
            rows.setdefault(cells[0].strip("`"), []).append(set(re.findall(r"`([^`]+)`", cells[1])))
    return rows


def all_boxes() -> list[tuple[str, dict]]:
    return [(str(p.relative_to(ROOT)), box) for p in page_files() for box in typed_boxes(p)]


def test_the_scan_finds_the_boxes_it_must():
    """The scan itself: it sees boxes drawn directly, through a helper and with a variable label."""
    found = {(f, tuple(b["labels"])) for f, b in all_boxes()}
    assert ("gptviz/app/sidebar.py", ("Prompt",)) in found
    assert ("gptviz/app/sidebar.py", ("Folder or Hub id",)) in found  # through checked_text
    assert ("gptviz/app/views/why_sweeps.py", ("Clean prompt",)) in found
    assert ("gptviz/app/views/unit_sections.py", ("one_token_box",)) in found  # its label is a variable
    assert ("app_pages/units.py", ("Neuron", "Head")) in found  # a conditional label
    assert len(found) >= 20


def test_every_box_a_visitor_types_into_has_a_recorded_limit():
    rows = recorded()
    missing = [
        f"{f}:{b['line']} {b['kind']} {b['labels']}"
        for f, b in all_boxes()
        if not any(set(b["labels"]) <= names for names in rows.get(f, []))
    ]
    assert missing == [], f"boxes docs/deploying.md's table does not name: {missing}"


@pytest.mark.slow
def test_every_box_has_a_bound_where_it_is_drawn():
    """Text boxes are drawn with max_chars (Streamlit cuts a crafted value to it on the server) or by a helper that
    sets it and checks the length; number boxes with both bounds (Streamlit resets a value outside them); a file upload
    with its size cap (the server checks the size again); no chat box."""
    unbounded = []
    for f, b in all_boxes():
        if b["kind"] in TEXT:
            # drawn here (by Streamlit or a record, in a variable or not) with max_chars, or by a checking helper
            ok = "max_chars" in b["keywords"] if b["via"] in (None, "record") else b["via"] in CHECKED
        elif b["kind"] == "file_uploader":  # bounded in the browser, then checked on the server (store_upload)
            ok = "max_upload_size" in b["keywords"]
        elif b["kind"] == "number_input":
            ok = (
                {"min_value", "max_value"} <= b["keywords"]
                or b["positional"] >= 3
                or (b["positional"] == 2 and "max_value" in b["keywords"])
                or b["via"] == "record"
            )
        else:
            ok = False
        if not ok:
            unbounded.append(f"{f}:{b['line']} {b['kind']} {b['labels']}")
    assert unbounded == []


def test_every_numeric_record_has_bounds():
    """A record drawn from a variable (the live generation's controls) is bounded by its rule: every record with a
    number for its default has a range or a list of choices, except the layer and head pickers, which pass the
    model's range where they are drawn (found by the scan above)."""
    from gptviz.app.rules import Choice, Number, Whole

    passed_where_drawn = {S.NORMS_LAYER, S.NORMS_HEAD, S.TWINS_LAYER, S.TWINS_HEAD}
    numeric = [
        r
        for r in S.records().values()
        if isinstance(r, S.Setting) and isinstance(r.default, (int, float)) and not isinstance(r.default, bool)
    ]
    assert len(numeric) >= 20
    unbounded = [
        r.key for r in numeric if r not in passed_where_drawn and not isinstance(r.rule, (Whole, Number, Choice))
    ]
    assert unbounded == []
    for r in numeric:
        if isinstance(r.rule, (Whole, Number)):
            args = r.rule.widget_args("number_input", r.default)
            assert args["min_value"] <= r.default <= args["max_value"], r.key


def test_the_table_names_only_boxes_that_exist():
    """A stale row (a box renamed or removed) fails too, so the table stays the list of what is there."""
    found: dict[str, set[str]] = {}
    for f, b in all_boxes():
        found.setdefault(f, set()).update(b["labels"])
    stale = [
        f"{f}: {sorted(names - found.get(f, set()))}"
        for f, rows in recorded().items()
        if f != "gptviz/app/links.py"
        for names in rows
        if names - found.get(f, set()) - {"A word", "Source token"}
    ]
    assert stale == []
    assert "gptviz/app/links.py" in recorded()


# ---- over-long values -----------------------------------------------------------------------------------------

# Every hostile check runs in one child process (one interpreter and import of torch and Streamlit, not one per
# check), each check with an `out` dict of its own; a check that raises reports its traceback under its name.
CHILD = textwrap.dedent("""
    import json, resource, sys, traceback
    resource.setrlimit(resource.RLIMIT_AS, (5 << 30, 5 << 30))  # a runaway check fails here, not the machine
    sys.path[:0] = [sys.argv[1]]
    from tests.support.pagetest import open_app, run_page
    from gptviz.app import keys as K
    results = {}
    for name, code in json.loads(sys.stdin.read()).items():
        out = {}
        try:
            exec(code, {"open_app": open_app, "run_page": run_page, "K": K, "out": out})
            results[name] = out
        except BaseException:
            results[name] = {"error": traceback.format_exc()[-3000:]}
    print("RESULT " + json.dumps(results))
""")

HOSTILE: dict[str, str] = {}  # each check's code (with pagetest's helpers and an `out` dict to fill), by name


def hostile(name: str, code: str) -> str:
    HOSTILE[name] = textwrap.dedent(code)
    return name


@pytest.fixture(scope="module")
def capped_runs() -> dict:
    """What every check of HOSTILE filled in, run in a child process capped at 5 GiB of address space."""
    done = run_python(CHILD, str(ROOT), input=json.dumps(HOSTILE), timeout=600)
    return json.loads(done.rsplit("RESULT ", 1)[1])


def capped(runs: dict, name: str) -> dict:
    out = runs[name]
    assert "error" not in out, out["error"]
    return out


PAIR_KEY = K.per_item(K.WHY_CLEAN, K.PATCH_PAIRS[1])
PAIR = hostile(
    "pair",
    f"""
    at = run_page("why", why_view="Patching", why_example={K.PATCH_PAIRS[1]!r}, **{{{PAIR_KEY!r}: "x" * {HUGE}}})
    out["state"] = [not at.exception, [w.value for w in at.warning], at.text_area(key={PAIR_KEY!r}).value]
    at.text_area(key={PAIR_KEY!r}).set_value("y" * 5000).run()
    out["message"] = [not at.exception, [w.value for w in at.warning], at.text_area(key={PAIR_KEY!r}).value]
    out["max_chars"] = at.text_area(key={PAIR_KEY!r}).proto.max_chars
""",
)
MODEL_NAME = hostile(
    "model name",
    f"""
    at = open_app(model_source=K.SOURCE_PRETRAINED, hf_name="g" * {HUGE})
    out["state"] = [not at.exception, [w.value for w in at.warning], at.text_input(key=K.HF_NAME).value]
    at.text_input(key=K.HF_NAME).set_value("h" * 5000).run()
    out["message"] = [not at.exception, [w.value for w in at.warning], at.text_input(key=K.HF_NAME).value]
    spec = at.session_state[K.MODEL_SPEC] if K.MODEL_SPEC in at.session_state else None
    out["spec"] = None if spec is None else len(spec.name)
""",
)
PROMPT = hostile(
    "prompt",
    f"""
    at = open_app()
    at.text_area(key=K.PROMPT).set_value("z" * {HUGE}).run()
    out["got"] = [not at.exception, [w.value for w in at.warning], len(at.session_state[K.PROMPT])]
""",
)
NUMBER = hostile(
    "number",
    """
    at = run_page("parameters")
    box = at.number_input(key=K.CALC_D_MODEL)
    default = box.value
    box.set_value(10**12).run()
    out["got"] = [not at.exception, default, at.number_input(key=K.CALC_D_MODEL).value]
""",
)
LINK_NAMES = ["prompt", "model", "pz", "unit"]
for _name in LINK_NAMES:
    hostile(
        f"link {_name}",
        f"""
        from streamlit.testing.v1 import AppTest
        from tests.support.pagetest import APP
        at = AppTest.from_file(APP, default_timeout=120)
        at.query_params[{_name!r}] = "q" * 400_000
        at.run()
        out["got"] = [not at.exception, [t.value for t in at.toast], len(at.session_state[K.PROMPT])]
    """,
    )


@pytest.mark.slow
def test_over_long_pair_prompts_are_refused_with_a_message(capped_runs):
    """The Why page's patching pair: 10 MB in session state (a link or a test), and 5,000 characters in a widget
    message (Streamlit cuts it to max_chars, one past the limit): each refused, the box back at its default."""
    out = capped(capped_runs, PAIR)
    said = f"That text is too long: the Clean prompt box takes at most {text_limits.PAIR_CHARS:,} characters"
    for way in ("state", "message"):
        ok, warnings, value = out[way]
        assert ok and any(said in w for w in warnings), (way, warnings)
        assert len(value) <= text_limits.PAIR_CHARS and not value.startswith(("x" * 50, "y" * 50))  # the example
    assert out["max_chars"] == text_limits.PAIR_CHARS + 1


@pytest.mark.slow
def test_an_over_long_folder_or_hub_id_is_refused_before_any_load(capped_runs):
    out = capped(capped_runs, MODEL_NAME)
    said = f"the Folder or Hub id box takes at most {text_limits.MODEL_NAME_CHARS:,} characters"
    for way in ("state", "message"):
        ok, warnings, value = out[way]
        assert ok and any(said in w for w in warnings) and value == "", (way, warnings)
    assert out["spec"] is None  # nothing to load: the box asks for a name again


@pytest.mark.slow
def test_an_over_long_prompt_message_is_cut_with_a_warning(capped_runs):
    """A widget message past the prompt's max_chars (20,001) is cut by Streamlit, then to 20,000 by the sidebar,
    which says so."""
    from gptviz.app.sidebar import MAX_PROMPT_CHARS

    ok, warnings, length = capped(capped_runs, PROMPT)["got"]
    assert ok and length == MAX_PROMPT_CHARS
    assert any(f"cut to its first {MAX_PROMPT_CHARS:,} characters" in w for w in warnings), warnings


@pytest.mark.slow
def test_an_out_of_range_number_is_reset_by_the_server(capped_runs):
    """A number box's bounds hold on the server: a crafted d_model of 10^12 is the default again, no exception."""
    ok, default, value = capped(capped_runs, NUMBER)["got"]
    assert ok and value == default and default < 10**6


def test_a_link_with_a_huge_value_or_too_many_names_gets_one_notice():
    state: dict = {}
    notices = links.apply_link(state, {"prompt": "p" * HUGE, "att_layer": "1"})
    assert notices == [f"The link's `prompt` is longer than {links.MAX_LINK_VALUE:,} characters; it was ignored."]
    assert state[K.ATT_LAYER] == 1 and K.PROMPT not in state
    crafted = {f"n{i}": "1" for i in range(100_000)}
    state = {}
    notices = links.apply_link(state, crafted)
    assert len(notices) == 1 and "100,000 parameters" in notices[0] and state == {K.LINKED_KEYS: {}}
    assert len(links.LINKED) <= 64  # every link gptviz writes fits under the count refused above


@pytest.mark.slow
@pytest.mark.parametrize("name", LINK_NAMES)
def test_a_link_value_past_its_limit_opens_the_app_with_a_notice(capped_runs, name):
    """Through the router, as a visitor's address: a toast, the default kept, no exception. 400,000 characters:
    Streamlit itself ignores a query string past 524,288, so that is the longest a link can bring."""
    ok, toasts, prompt_length = capped(capped_runs, f"link {name}")["got"]
    assert ok and any(f"`{name}` is longer than {links.MAX_LINK_VALUE:,} characters" in t for t in toasts), toasts
    assert prompt_length < 400_000
