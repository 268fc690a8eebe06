"""The sandbox: model-written code runs only here (`sandbox.process.run_python`), in a subprocess with CPU,
memory, time and output limits, no network, a throwaway working directory and no inherited secrets.

Below the verifiers that use it (`python_tests`) and the generators that run candidate code (`python_function`);
it imports only `core`.
"""
