"""The executor: the only code that runs beside an untrusted kernel.

One executor process per contestant (`python -m atrex.runner.executor`). It imports exactly one
candidate, runs the calls the judge asks for with every recorder on, and sends back data: outputs,
launch records, host times, raw timings and what its guards saw. It never decides a status and
imports nothing of the runner but `atrex.runner.contract`, so nothing here can reach the judge's
verdict.
"""
