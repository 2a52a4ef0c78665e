"""The message contract between the judge and an executor: the only code both sides import.

`wire` frames messages and rebuilds tensors from plain data (never by unpickling); `protocol`
names the commands and the typed records an executor sends back.
"""
