# Image folders (`dptrain data images`): a folder of PNG and JPEG files in 3 classes, some bad,
# converted and checked (order, labels, class names, pixels), then trained on 2 ranks against one
# replica; without the decoders, the one-line refusal.
set(_dpt_images_mpi "")
if(DPT_WITH_MPI)
  set(_dpt_images_mpi "${MPIEXEC_EXECUTABLE} --oversubscribe")
endif()
if(DPT_BUILD_TOOLS AND DPT_WITH_IMAGES)
  add_executable(image_folder_gen fixtures/image_folder_gen.c)
  target_link_libraries(image_folder_gen PRIVATE dptrain_static PkgConfig::DPT_TURBOJPEG
                                                 PkgConfig::DPT_SPNG)
  target_include_directories(image_folder_gen PRIVATE ${PROJECT_SOURCE_DIR})
  add_test(NAME images_cli
           COMMAND bash "${CMAKE_CURRENT_SOURCE_DIR}/scripts/images_cli_test.sh"
                   $<TARGET_FILE:dptrain_cli> $<TARGET_FILE:image_folder_gen>
                   "${CMAKE_CURRENT_BINARY_DIR}/images-scratch" "${_dpt_images_mpi}")
  set_tests_properties(images_cli PROPERTIES TIMEOUT 300 LABELS "cli;mpi;data;train"
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
elseif(DPT_BUILD_TOOLS)
  add_test(NAME images_cli COMMAND $<TARGET_FILE:dptrain_cli> data images . --size 8 --out x.st)
  set_tests_properties(images_cli PROPERTIES LABELS "cli;data"
                       PASS_REGULAR_EXPRESSION "built without image support")
endif()
