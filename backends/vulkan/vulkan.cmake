# Vulkan backend: included by the top-level CMakeLists.txt when DPT_WITH_VULKAN is ON.
# Compiles every shaders/*.comp to SPIR-V 1.3 (Vulkan 1.1, which lavapipe and every current GPU
# driver accept) at build time, validates each module with spirv-val when it is installed, and
# embeds the modules in the library (dpt_vulkan_spirv[], see base/embedded.h).
set(_dpt_vk_dir "${CMAKE_CURRENT_LIST_DIR}")
set(_dpt_vk_out "${CMAKE_CURRENT_BINARY_DIR}/vulkan_spirv")
file(MAKE_DIRECTORY "${_dpt_vk_out}")
file(GLOB _dpt_vk_shaders CONFIGURE_DEPENDS "${_dpt_vk_dir}/shaders/*.comp")
file(GLOB _dpt_vk_includes CONFIGURE_DEPENDS "${_dpt_vk_dir}/shaders/*.glsl")
set(_dpt_vk_spv "")
foreach(_src IN LISTS _dpt_vk_shaders)
  get_filename_component(_name "${_src}" NAME_WE)
  set(_spv "${_dpt_vk_out}/${_name}.spv")
  set(_validate "")
  if(DPT_SPIRV_VAL)
    set(_validate COMMAND "${DPT_SPIRV_VAL}" --target-env vulkan1.1 "${_spv}")
  endif()
  add_custom_command(
    OUTPUT "${_spv}"
    COMMAND "${DPT_GLSLC}" --target-env=vulkan1.1 -O -Werror -I "${_dpt_vk_dir}/shaders" -o
            "${_spv}" "${_src}"
    ${_validate}
    DEPENDS "${_src}" ${_dpt_vk_includes}
    COMMENT "Compiling shader ${_name}.comp"
    VERBATIM)
  list(APPEND _dpt_vk_spv "${_spv}")
endforeach()
if(NOT DPT_SPIRV_VAL)
  message(STATUS "spirv-val not found: SPIR-V modules are not validated (install spirv-tools)")
endif()

dpt_embed_files(OUTPUT "${CMAKE_CURRENT_BINARY_DIR}/vulkan_spirv.c" SYMBOL dpt_vulkan_spirv
                FILES ${_dpt_vk_spv})

find_package(Vulkan REQUIRED)
list(APPEND DPT_SOURCES
     backends/vulkan/vk_backend.c
     backends/vulkan/vk_error.c
     backends/vulkan/vk_exec.c
     backends/vulkan/vk_memory.c
     backends/vulkan/vk_ops.c
     backends/vulkan/vk_layers.c
     "${CMAKE_CURRENT_BINARY_DIR}/vulkan_spirv.c")
list(APPEND DPT_PRIVATE_LIBS Vulkan::Vulkan)
list(APPEND DPT_PRIVATE_DEFS DPT_HAVE_VULKAN)
list(APPEND DPT_PKG_REQUIRES_PRIVATE vulkan)
