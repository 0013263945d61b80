"""``python -m diffusion_policy_ros.cli`` = ``dpr`` (torchrun, tests)."""

import sys

from diffusion_policy_ros.cli import main

sys.exit(main())
