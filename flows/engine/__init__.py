"""The engine every stage flow runs on, apart from the flows themselves: the Prefect API and the temporary server
(`server`, `temporary_server`, `process`), the Dask cluster (`cluster`), task runners and sharded execution
(`sharding`), the one cache policy (`caching`), the shared result store (`workspace`), progress and the console.
Nothing here imports a stage flow; no module here imports one that imports it back.
"""
