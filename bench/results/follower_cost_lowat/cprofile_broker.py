import cProfile, signal, sys, runpy, os
prof = cProfile.Profile()
def on(sig, frm): prof.enable()
def off(sig, frm):
    prof.disable(); prof.dump_stats(os.environ["PROF_OUT"] + f".{os.getpid()}")
signal.signal(signal.SIGUSR1, on)
signal.signal(signal.SIGUSR2, off)
sys.argv = ["logbus.cli"] + sys.argv[1:]
runpy.run_module("logbus.cli", run_name="__main__")
