from distributed import Client, LocalCluster

from bank import bank
from virtualtime import experiment

if __name__ == "__main__":  # process pools and clusters start fresh interpreters
    grid = {"rate": [0.5, 0.6, 0.7], "customers": 10_000}
    mine = experiment.sweep(bank, grid, replications=400, seed=1, executor="processes")
    with LocalCluster(n_workers=2, threads_per_worker=1) as cluster, Client(cluster) as client:
        theirs = experiment.sweep(bank, grid, replications=400, seed=1, executor=client)
    assert mine.values("wait", 2) == theirs.values("wait", 2)  # bit for bit
