package org.s3io.spark;

import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.spark.TaskContext;
import org.apache.spark.api.python.ChainedPythonFunctions;
import org.apache.spark.api.python.PythonEvalType$;
import org.apache.spark.api.python.PythonFunction;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.NamedExpression$;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.execution.datasources.v2.python.PythonInputPartition;
import org.apache.spark.sql.execution.datasources.v2.python.PythonPartitionReaderFactory;
import org.apache.spark.sql.execution.datasources.v2.python.UserDefinedPythonDataSource;
import org.apache.spark.sql.execution.datasources.v2.python.UserDefinedPythonDataSource$;
import org.apache.spark.sql.execution.metric.SQLMetric;
import org.apache.spark.sql.execution.python.ArrowPythonRunner;
import org.apache.spark.sql.execution.python.ArrowPythonRunner$;
import org.apache.spark.sql.execution.python.PythonSQLMetrics$;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataType$;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

import scala.Option;
import scala.Tuple2;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Reads a partition as columnar batches: the Arrow batches the Python reader yields, as Spark's ArrowColumnVectors,
 * with no per-row copy on the way in.
 *
 * <p>Spark's own factory for Python sources runs the same Python read function (the mapInArrow protocol, one
 * Python worker per task) but turns every batch into rows and copies each row into an UnsafeRow: about half the
 * wall of a one-column sum. This factory asks Spark's Arrow runner for the batches and hands them on as they are;
 * Spark's generated code reads the columns directly. The row reader (for a plan that asks for rows) is Spark's own.
 */
public class S3ParquetReaderFactory implements PartitionReaderFactory {
  private static final long serialVersionUID = 1L;

  private final UserDefinedPythonDataSource source;
  private final byte[] pickledReadFunc;
  private final StructType outputSchema;
  private final Option<String> jobArtifactUuid;
  private final Option<String> sessionUuid;

  public S3ParquetReaderFactory(
      UserDefinedPythonDataSource source,
      byte[] pickledReadFunc,
      StructType outputSchema,
      Option<String> jobArtifactUuid,
      Option<String> sessionUuid) {
    this.source = source;
    this.pickledReadFunc = pickledReadFunc;
    this.outputSchema = outputSchema;
    this.jobArtifactUuid = jobArtifactUuid;
    this.sessionUuid = sessionUuid;
  }

  @Override
  public boolean supportColumnarReads(InputPartition partition) {
    return true;
  }

  @Override
  public PartitionReader<InternalRow> createReader(InputPartition partition) {
    return new PythonPartitionReaderFactory(source, pickledReadFunc, outputSchema, jobArtifactUuid, sessionUuid)
        .createReader(partition);
  }

  @Override
  public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
    return new BatchReader((PythonInputPartition) partition);
  }

  /** One task's batches from the Python worker; each is valid until the next call of {@code next()}. */
  private final class BatchReader implements PartitionReader<ColumnarBatch> {
    private final scala.collection.immutable.Map<String, SQLMetric> metrics = taskMetrics();
    private final scala.collection.Iterator<ColumnarBatch> batches;
    private ColumnarBatch current;

    BatchReader(PythonInputPartition partition) {
      SQLConf conf = SQLConf.get();
      PythonFunction function = source.createPythonFunction(pickledReadFunc);
      ChainedPythonFunctions chained =
          new ChainedPythonFunctions(CollectionConverters.asScala(List.of(function)).toSeq());
      long resultId = NamedExpression$.MODULE$.newExprId().id();
      StructType input = new StructType().add("struct", UserDefinedPythonDataSource$.MODULE$.readInputSchema());
      ArrowPythonRunner runner =
          new ArrowPythonRunner(
              CollectionConverters.asScala(List.of(new Tuple2<ChainedPythonFunctions, Object>(chained, resultId)))
                  .toSeq(),
              PythonEvalType$.MODULE$.SQL_MAP_ARROW_ITER_UDF(),
              new int[][] {{0}},
              input,
              conf.sessionLocalTimeZone(),
              conf.arrowUseLargeVarTypes(),
              ArrowPythonRunner$.MODULE$.getPythonRunnerConfMap(conf),
              metrics,
              jobArtifactUuid,
              sessionUuid);
      Object[] pickled = {partition.pickedPartition()};
      InternalRow row = new GenericInternalRow(new Object[] {new GenericInternalRow(pickled)});
      scala.collection.Iterator<scala.collection.Iterator<InternalRow>> rows =
          scala.collection.Iterator$.MODULE$.single(scala.collection.Iterator$.MODULE$.single(row));
      TaskContext context = TaskContext.get();
      this.batches = runner.compute(rows, context.partitionId(), context);
    }

    @Override
    public boolean next() {
      if (!batches.hasNext()) {
        current = null;
        return false;
      }
      current = unwrap(batches.next());
      return true;
    }

    @Override
    public ColumnarBatch get() {
      return current;
    }

    @Override
    public void close() {
      // the runner's task-completion listener releases the Arrow buffers and returns the Python worker
    }

    @Override
    public CustomTaskMetric[] currentMetricsValues() {
      Map<String, Object> values = new HashMap<>();
      CollectionConverters.asJava(metrics).forEach((name, metric) -> values.put(name, metric.value()));
      return source.createPythonTaskMetrics(scala.collection.immutable.Map.from(CollectionConverters.asScala(values)));
    }
  }

  /**
   * The Python runner's metrics for one task, made new for it. Spark's {@code PythonCustomMetric.pythonMetrics} is
   * one map per JVM: every task on an executor would add to the same counters and report their running total as its
   * own, so a scan's {@code pythonDataReceived} grew with each query and counted a task's bytes again in every later
   * task of the same executor.
   */
  private static scala.collection.immutable.Map<String, SQLMetric> taskMetrics() {
    Map<String, SQLMetric> fresh = new HashMap<>();
    PythonSQLMetrics$ described = PythonSQLMetrics$.MODULE$;
    CollectionConverters.asJava(described.pythonSizeMetricsDesc().keys()).forEach(k -> fresh.put(k, new SQLMetric("size", -1L)));
    CollectionConverters.asJava(described.pythonTimingMetricsDesc().keys())
        .forEach(k -> fresh.put(k, new SQLMetric("timing", -1L)));
    CollectionConverters.asJava(described.pythonOtherMetricsDesc().keys()).forEach(k -> fresh.put(k, new SQLMetric("sum", -1L)));
    return scala.collection.immutable.Map.from(CollectionConverters.asScala(fresh));
  }

  /** The read's columns out of the one struct column the mapInArrow protocol wraps them in. */
  private ColumnarBatch unwrap(ColumnarBatch wrapped) {
    ArrowColumnVector struct = (ArrowColumnVector) wrapped.column(0);
    DataType actual = struct.dataType();
    if (!DataType$.MODULE$.equalsIgnoreCompatibleNullability(actual, outputSchema)) {
      throw new IllegalStateException(
          "s3parquet: the Python reader returned " + actual.catalogString() + " where the scan expects "
              + outputSchema.catalogString());
    }
    ColumnVector[] columns = new ColumnVector[outputSchema.fields().length];
    for (int i = 0; i < columns.length; i++) {
      columns[i] = struct.getChild(i);
    }
    ColumnarBatch batch = new HeldBatch(columns);
    batch.setNumRows(wrapped.numRows());
    return batch;
  }

  /**
   * A batch whose vectors the Arrow runner owns: it loads the next batch into the same vectors and frees them when
   * the task ends. Spark closes a consumed batch ({@code ColumnarToRowExec} calls {@code closeIfFreeable}), and
   * closing a struct, list or map vector drops its children, so the runner's next batch would not load.
   */
  private static final class HeldBatch extends ColumnarBatch {
    HeldBatch(ColumnVector[] columns) {
      super(columns);
    }

    @Override
    public void closeIfFreeable() {}

    @Override
    public void close() {}
  }
}
