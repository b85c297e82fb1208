"""``python -m nodeagent.job``: one part of one job, the process an agent starts.

The module name is part of the contract: agents start job processes with it, and
adoption records and the fault bench find them by it in their command lines.
"""

import os
import sys

from nodeagent.job.sleep_job import main

if __name__ == "__main__":
    exit_code = main()
    # The agent reports the part finished when this process is gone: skip the
    # interpreter's teardown (50 to 100 ms here, 5 to 10 cluster seconds at
    # 100x). The bus is closed and every frame sent; only stdio may hold bytes.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)
