"""ament_python package diffusion_policy_ros (also pip-installable)."""

from glob import glob

from setuptools import find_packages, setup

package_name = "diffusion_policy_ros"

setup(
    name=package_name,
    version="0.1.0",
    packages=find_packages(exclude=["test", "test.*"]),
    package_data={package_name: ["sim/assets/*", "description/*.urdf"]},
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{package_name}"]),
        (f"share/{package_name}", ["package.xml"]),
        (f"share/{package_name}/launch", glob("launch/*.launch.py")),
        (f"share/{package_name}/config",
         glob("config/*.yaml") + glob("config/*.rviz") + glob("config/*.xml")),
        (f"share/{package_name}/urdf", ["diffusion_policy_ros/description/arm.urdf"]),
        *[(f"share/{package_name}/checkpoints/{name}", glob(f"checkpoints/{name}/*.*"))
          for name in ("grasp_unet_cd32", "grasp_unet_cd", "grasp_unet")],
    ],
    install_requires=["setuptools"],
    zip_safe=True,
    maintainer="diffusion_policy_ros developers",
    maintainer_email="dev@diffusion-policy-ros.invalid",
    description="Language-conditioned diffusion policy grasping with ROS 2",
    license="Apache-2.0",
    tests_require=["pytest"],
    entry_points={
        "console_scripts": [
            "rgbd_sync_node = diffusion_policy_ros.ros.rgbd_sync_node:main",
            "pd_tracker_node = diffusion_policy_ros.ros.pd_tracker_node:main",
            "sim_node = diffusion_policy_ros.ros.sim_node:main",
            "policy_node = diffusion_policy_ros.ros.policy_node:main",
            "dpr = diffusion_policy_ros.cli:main",
        ],
    },
)
