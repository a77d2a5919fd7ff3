"""`cfgen plan`: what a run will cost before it starts (models present offline, devices, disk, time).

May import: `tasks.core` (the assembled `Params` too), `tasks.image.params` (the generate section it prices),
`tasks.plan`.
"""
