"""The scoreboard's parts, each small enough to read on its own (the command is benchmarks/scoreboard.py):

- `corpus`: reads the labelled programs of benchmarks/corpus/ and says what is wrong with a header, so a case
  with a bad label is refused before anything runs (a wrong label would score every tool wrongly);
- `tools`: runs one program under one tool with a wall limit and leaves nothing behind;
- `keep`: the --keep folder of a run (its raw outputs), written and read back;
- `parsers`: turns what each tool printed into the same kind of report, by rules a reader can check;
- `score`: the verdict of each run and the metrics (recall, precision, F1, helpfulness, noise, time);
- `table`: the text table.

It imports no torch and nothing of the sandbox: the sandbox is one of the tools being measured, and it is run the
way a user runs it (a subprocess), like the others.
"""
