"""What the labs call: a catalogue bug shown without its answers, a graded prediction, its variants run, a
learner's fix checked; and generic checks for the build-it-yourself labs and the exercises.

    from sandbox import lab
    b = lab.Lab("kv-sync")                 # a catalogue entry (python -m sandbox.repro --list)
    b.show("broken")                       # its broken code, highlighted, without the BUG:/FIX: comments
    b.show("fixed", hints=True)            # as written, hints and all; b.source("broken") is the text
    lab.kinds()                            # the diagnosis kinds a prediction can name, one sentence each
    b.predict(verdict="hang", kind="p2p_cycle", culprits=[0, 1])   # for the next b.run("broken")
    res = b.run("broken", timeline=True)   # shows the result and the timeline, then grades the prediction
    b.last_grade.right, b.last_grade.score # {"verdict": True, ...}, "2 of 3"
    c = b.check(my_fixed)                  # right, hang, wrong, error, crash, contract or rule
    c = b.check(my_fixed, lenient=True)    # a broken contract (an isend never waited on) accepted, still named
    b.run("fixed")                         # the reference fix

    c = lab.check(fn, n=4, reference=ref)  # fn on 4 ranks against ref(4), single-process; or expect="hang",
                                           # kind="p2p_cycle", culprits=[0, 1] for "make it hang" exercises
    lab.predict_values(fn, [6, 6, 6, 6])   # lab 00: what each rank returns, predicted and checked
    lab.Rule(says="...", found=lambda res: None or "what broke it")
    lab.communicates(min_calls=1)          # a rule: every rank makes a call that moves data
    lab.note(read_block=3)                 # inside a rank: a fact for a rule; lab.notes(res) -> {rank: [dict]}

`run` and `check` show what they found (in Jupyter as HTML, elsewhere as text) and return it: assign the
returned value (`res = b.run(...)`) or end the line with `;`, or Jupyter shows it a second time.

Parts: `catalogue` (Lab, showing code without hints, grade_fix), `checks` (Check, the judge every check shares,
the generic check), `predictions` (kinds, predictions and their grades), `rules` (Rule, communicates, note,
notes), `values` (predict_values), `display` (showing results and timelines, reference solutions kept closed).
"""
from sandbox.lab.catalogue import Lab, grade_fix, strip_hints
from sandbox.lab.checks import TITLES, VERDICTS, Check, check
from sandbox.lab.display import show_result, solution, timeline_png
from sandbox.lab.predictions import KINDS, Grade, Prediction, kinds
from sandbox.lab.predictions import VERDICTS as RUN_VERDICTS
from sandbox.lab.rules import Rule, communicates, note, notes
from sandbox.lab.values import predict_values

__all__ = ["KINDS", "RUN_VERDICTS", "TITLES", "VERDICTS", "Check", "Grade", "Lab", "Prediction", "Rule", "check",
           "communicates", "grade_fix", "kinds", "note", "notes", "predict_values", "show_result", "solution",
           "strip_hints", "timeline_png"]
