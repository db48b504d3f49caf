%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
%r = "test.op"() ({
"test.op"() : () -> ()
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
}) : () -> tensor<1xf32>
