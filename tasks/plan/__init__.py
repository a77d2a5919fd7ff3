"""`cfgen plan`: what a run will cost before it starts (models present offline, devices, disk, time)."""
