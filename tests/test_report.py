"""One report model, three renderers: plain text, rich (a terminal; NO_COLOR honoured) and HTML show the same facts
in the same order for the same result, taken from real runs; the palette is the model's."""
import dataclasses
import html
import io
import re
import textwrap

import pytest

import scenarios_contracts
from sandbox import launch, run_script
from sandbox.report import html as report_html
from sandbox.report import model, terminal, text

SGR = re.compile(r"\x1b\[[0-9;]*m")
COLOUR_SGR = re.compile(r"\x1b\[(?:[0-9;]*;)?(?:3[0-9]|9[0-7]|38;[25];[0-9;]+)m")  # a foreground colour code

# A run with something in every part of the report: ranks that ended three ways, a pending call and an error site,
# output long enough to be cut, and characters HTML and rich markup would take for their own.
SCRIPT = textwrap.dedent("""
    import time
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for i in range(8 if rank == 0 else 2):
        print(f"rank {rank} says <b>[bold]{i}[/bold] & more")
    dist.all_reduce(torch.ones(2))
    if rank == 2:
        raise ValueError("bad <batch> & [red]co[/red]")
    if rank == 1:
        dist.recv(torch.empty(2), src=0)  # rank 0 never sends: it is busy in its own code when the run is ended
    time.sleep(60)
""")
CUT = 5


def _rich(res, **kw) -> str:
    out = io.StringIO()
    terminal.print_result(res, file=out, max_log_lines=CUT, **kw)
    return out.getvalue()


def _html_text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", fragment))


def _facts(rendered: str) -> str:
    """What a reader sees, whatever the line breaks: every character but white space, in order (rich wraps long
    lines and folds long cells at its width; the text and the HTML do not)."""
    return "".join(SGR.sub("", rendered).split())


def _renderings(res) -> dict[str, str]:
    return {"text": text.render(res, logs=True, max_log_lines=CUT), "rich": _rich(res),
            "html": _html_text(report_html.run_result(res, max_log_lines=CUT))}


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory):
    script = tmp_path_factory.mktemp("report") / "three_ways.py"
    script.write_text(SCRIPT)
    res = run_script(str(script), world_size=3)
    assert res.verdict == "error" and [str(r.outcome) for r in res.ranks] == ["stopped", "stopped", "error"], \
        res.text(logs=True)
    # ranks the sandbox stops die of its SIGKILL, not of a SIGSEGV while asked for two dumps at once (test_stop.py)
    assert not [r.rank for r in res.ranks if "Fatal Python error" in r.output], res.text(logs=True)
    return res


@pytest.fixture(scope="module")
def warned_run():
    res = launch(scenarios_contracts.never_destroyed, world_size=2)
    assert res.ok and [w.kind for w in res.warnings] == ["not_destroyed"], res.text()
    return res


@pytest.mark.parametrize("which", ["failed_run", "warned_run"])
def test_every_renderer_shows_the_same_facts_in_the_same_order(which, request, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    res = request.getfixturevalue(which)
    r = _renderings(res)
    assert _facts(r["text"]) == _facts(r["rich"]) == _facts(r["html"])
    # and the facts are there, in the model's order: verdict, why, broken contracts, the ranks, their output
    t = r["text"]
    order = [res.headline(), res.diagnosis.summary, *(f"Warning [{w.kind}]: {w.summary}" for w in res.warnings),
             "rank  outcome  pending call  site"]
    order += [f"[rank {x.rank}] {x.output.splitlines()[-1]}" for x in res.ranks if x.output]
    at = [t.find(s) for s in order]
    assert -1 not in at and at == sorted(at), list(zip(order, at))


def test_the_facts_comparison_can_fail(failed_run):
    rep = model.build(failed_run, max_log_lines=CUT)
    html_facts = _facts(_html_text(report_html.draw(rep)))
    # the ranks in another order, or the layout of the old plain text (the table above the diagnosis): caught
    assert _facts(text.draw(dataclasses.replace(rep, rows=rep.rows[::-1]))) != html_facts
    old_text = "\n".join([rep.headline, *text.table(rep.rows), rep.diagnosis]
                         + [log.prefix + line for log in rep.logs for line in log.lines])
    assert _facts(old_text) != html_facts


def test_the_failed_run_reads_as_it_should(failed_run):
    t = text.render(failed_run, logs=True, max_log_lines=CUT)
    lines = t.splitlines()
    assert lines[0] == failed_run.headline() and lines[0].startswith("ERROR [rank_error]: 3 ranks in ")
    assert re.search(r"^0 +stopped +-$", t, re.M), t
    assert re.search(r"^1 +stopped +recv peer 0 +\S*three_ways\.py:14$", t, re.M), t
    assert re.search(r"^2 +error +- +\S*three_ways\.py:12$", t, re.M), t
    assert "[rank 0] ... 3 earlier lines" in t and "[rank 0] rank 0 says <b>[bold]7[/bold] & more" in t
    assert "[rank 0] rank 0 says <b>[bold]2[/bold]" not in t  # cut: the last CUT lines of rank 0 only
    assert "[rank 1] ... " not in t  # nothing cut where there was nothing to cut
    # rich printed the markup-like text as it is, and HTML escaped it
    assert "[bold]7[/bold]" in _rich(failed_run)
    assert "&lt;b&gt;[bold]7[/bold] &amp; more" in report_html.run_result(failed_run, max_log_lines=CUT)


def test_no_color_is_honoured_in_a_terminal(failed_run, monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")  # as if stdout were a terminal
    monkeypatch.delenv("NO_COLOR", raising=False)
    coloured = _rich(failed_run)
    assert COLOUR_SGR.search(coloured), "the check below could not fail: no colour even without NO_COLOR"
    monkeypatch.setenv("NO_COLOR", "1")
    plain = _rich(failed_run)
    assert not COLOUR_SGR.search(plain) and "\x1b[1m" in plain  # no colour; the verdict still bold
    assert _facts(plain) == _facts(coloured)


def test_one_palette_colours_every_renderer(failed_run):
    h = report_html.run_result(failed_run)
    assert f"color: {model.RED}; font-weight: bold\">ERROR [rank_error]" in h  # the verdict
    assert f'color: {model.GREY}">stopped' in h and f'color: {model.RED}">error' in h  # outcomes
    assert f'color: {model.rank_colour(2)}">[rank 2] ' in h
    rich_styles = {str(model.verdict_colour("error")), model.outcome_colour("stopped"), model.rank_colour(1)}
    from rich.color import Color
    for c in rich_styles:  # the terminal is given the same colours (rich maps them to the terminal's own)
        assert Color.parse(c).triplet is not None
    assert model.outcome_colour("hung") == model.verdict_colour("hang") == model.AMBER


def test_the_check_banner_shows_the_run_folded_when_right(warned_run):
    right = report_html.check(True, "Right", "as expected <ok>", warned_run)
    wrong = report_html.check(False, "Wrong", "not so", warned_run)
    assert "\u2714 Right" in right and "as expected &lt;ok&gt;" in right and "<details style" in right
    assert "\u2718 Wrong" in wrong and "<details open" in wrong and "Warning [not_destroyed]:" in wrong
    assert report_html.rank_colour(9) == model.RANK_COLOURS[1]
