"""The judge: decides every status, and never imports candidate code.

One judge process per operator (`python -m atrex.runner.judge`, started by `atrex.runner.sandbox`).
It loads the operator's reference and input generator, draws the secret seeds, computes the
expected outputs in high precision, starts one executor process per contestant
(`atrex.runner.executor`), asks each for calls and timings, and judges the data that comes back.
Only the judge speaks to the evaluator.
"""
