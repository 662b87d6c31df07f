"""Build it yourself: the reference solutions, single-process references and starting points of the labs in which
learners build the parallelism that training uses (a ring all-reduce, data parallelism with buckets, sharded
optimizers and parameters, tensor and pipeline parallelism) on N real ranks, and the cost model they measure.

Each module is what one lab calls; the learner's code is written in the notebook and checked with
`sandbox.lab.check` against the module's `reference`."""
