"""Slurm clusters: an attempt on a cluster is a batch job submitted through the login node.

The dashboard reaches only the login node (over SSH, as any host); everything else goes through
Slurm's own commands there: `sbatch` submits the rendered batch script, `squeue`/`sacct` say where
the job stands, `srun --overlap` runs checks inside its allocation, `scancel` stops it. The job's
directory (script, output, exit status) is on a filesystem the login node shares with the compute
nodes, so the log is mirrored from the login node as it is from any host.
"""
