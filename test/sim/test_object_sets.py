"""Object sets: the varied set puts a seeded few of thirteen objects on the table, hides the
rest from the camera, names each episode's object alone, and the expert lifts them."""

import dataclasses

import mujoco
import numpy as np
import pytest

from diffusion_policy_ros.instructions.referring import parse_reference, resolve
from diffusion_policy_ros.sim.expert_eval import evaluate_expert
from diffusion_policy_ros.sim.object_sets import EXTRA_OBJECTS, load_object_set
from diffusion_policy_ros.sim.runtime import SimulationRuntime
from diffusion_policy_ros.sim.scene import ArmScene, load_model
from diffusion_policy_ros.sim.sim_config import SimConfig

VARIED = SimConfig(object_set="varied", render_observations=False)


@pytest.fixture(scope="module")
def runtime():
    return SimulationRuntime(VARIED, with_camera=False)


def test_the_five_are_the_shipped_scene_and_varied_adds_to_them():
    five, varied = load_object_set("five"), load_object_set("varied")
    assert five.nbody == load_model().nbody
    assert varied.nbody == five.nbody + len(EXTRA_OBJECTS)
    with pytest.raises(ValueError, match="object_set"):
        load_object_set("many")
    with pytest.raises(ValueError, match="objects_on_table"):
        ArmScene(varied, objects_on_table=(0, 3))


def test_a_seeded_few_stand_on_the_table_and_the_rest_wait_out_of_sight(runtime):
    scene = runtime.scene
    m, d = scene.model, scene.data
    camera = d.cam_xpos[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_CAMERA, "kinect")]
    table = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, "table_top")
    sets, repeated_colour, hidden_by_table = set(), False, 0
    for seed in range(40):
        runtime.reset(seed=seed)
        names = scene.on_table_names
        assert 4 <= len(names) <= 7
        sets.add(names)
        colours = [n.split("_")[0] for n in names]
        repeated_colour |= len(set(colours)) < len(colours)
        for obj in scene.objects:
            centre = d.xpos[obj.body_id]
            if obj in scene.on_table:
                assert abs(centre[2] - obj.half_height_m) < 0.003, (seed, obj.name, centre)
                continue
            assert centre[2] < -0.5, (seed, obj.name, centre)
            geom = np.array([-1], dtype=np.int32)
            fraction = mujoco.mj_ray(m, d, camera, centre - camera, None, 1, -1, geom)
            # Something on the way (the table top, or an object on it) hides it.
            assert geom[0] not in (-1, obj.geom_id) and fraction < 1.0, (seed, obj.name)
            hidden_by_table += geom[0] == table
    assert len(sets) > 30 and repeated_colour and hidden_by_table > 0


def test_each_episode_s_words_name_its_object_alone_in_the_layout(runtime):
    beyond_colour = 0
    for seed in range(40):
        state = runtime.reset(seed=seed)
        objects = runtime.referents()
        assert resolve(parse_reference(state.instruction), objects).target == state.target
        target = next(o for o in objects if o.name == state.target)
        beyond_colour += sum(o.colour == target.colour and o.shape == target.shape
                             for o in objects) > 1
    assert beyond_colour > 0  # some needed a size, a place or a neighbour


def test_the_expert_lifts_spheres_small_cubes_and_repeated_colours():
    config = dataclasses.replace(VARIED, render_observations=False)
    ev = evaluate_expert(episodes=4, seed=1007, config=config)
    assert ev.success_rate == 1.0, ev.episodes
    assert {e.target for e in ev.episodes} >= {"blue_sphere"}, ev.episodes
